/*
 * splitbench's delay relay: a TCP relay that holds every byte back by a fixed delay in
 * each direction, for kernels without netem (see relay.py, which builds and runs this).
 *
 *   relay DELAY_US LISTEN_IP:PORT=TARGET_IP:PORT [...]
 *
 * One thread, one epoll loop. Each chunk read is due DELAY_US after it arrived at the
 * socket (the kernel's receive stamp, not when the loop read it); a timerfd wakes the
 * loop for the earliest release, and the thread's timer slack is 1 us.
 *
 * A timer on a virtual machine fires late: 20-50 us on the development VM, more the
 * longer the CPU slept (a 2 ms hold was released 46 us late on average, a 0.5 ms one
 * 25 us), and a busy CPU less. That lateness was part of every emulated round trip, so
 * a link's latency depended on how idle the machine was, not only on its delay. Each
 * direction therefore arms its timer earlier by how late its recent releases left (a
 * running mean, at most 100 us and half the delay): releases are then on time on
 * average, a single one early or late by the timer's jitter. Spinning to the exact time
 * instead would take host B's CPU, where the relay runs, while B works on an earlier
 * message.
 * On exit (SIGTERM) and for each connection that ends, the log gets, per direction, when
 * the chunks the timer released left against their due time, and when they would have
 * left without the early arming.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (256 * 1024)
#define MAX_QUEUED (4 << 20) /* stop reading a direction while this much waits */
#define MAX_LISTENERS 64
/* The most a timer is armed early: no chunk leaves more than this before it is due.
 * Above the lateness a virtual machine's timer shows (docs/method.md), so the early
 * arming can make up for all of it; half the delay caps it too. */
#define EARLY_MAX_NS 300000

typedef struct chunk {
    struct chunk *next;
    uint64_t due_ns;
    size_t len, sent;
    char data[];
} chunk;

typedef struct direction {
    int src, dst;
    int port; /* the target's port, for the statistics */
    int64_t early_ns; /* how much earlier than due to arm the timer: its recent lateness */
    uint64_t chunks, bytes;
    uint64_t wakes; /* chunks the timer released (on time or not) */
    int64_t timer_late_sum_ns, left_sum_ns, left_max_ns; /* left: from due, at release */
    chunk *head, *tail; /* held or being written, in order */
    size_t queued;
    int src_done, closed, reading, writing;
    struct direction *peer;
} direction;

typedef struct { int fd; struct sockaddr_in target; } listener;

static int epfd, timer;
/* Epoll events carry a direction pointer, or one of these addresses. */
static char timer_tag;
static listener *listener_of(void *ptr);
static uint64_t delay_ns;
static volatile sig_atomic_t stopping;
static void on_term(int sig) { (void)sig; stopping = 1; }
static listener listeners[MAX_LISTENERS];
static int nlisteners;
static direction **dirs;
static size_t ndirs, capdirs;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void die(const char *what) { perror(what); exit(1); }

/* What a direction's timer releases came to, for the relay's log (see the top). */
static void stats(direction *d, const char *way) {
    if (!d->chunks) return;
    double wakes = d->wakes ? (double)d->wakes : 1.0;
    fprintf(stderr, "relay port %d %s: %llu chunks, %llu bytes; %llu released by the "
            "timer, %+.1f us from due on average (worst %+.1f), %+.1f without arming it "
            "early\n", d->port, way, (unsigned long long)d->chunks,
            (unsigned long long)d->bytes, (unsigned long long)d->wakes,
            d->left_sum_ns / 1e3 / wakes, d->left_max_ns / 1e3,
            d->timer_late_sum_ns / 1e3 / wakes);
}

static int parse(const char *text, struct sockaddr_in *addr) {
    char host[64];
    const char *colon = strrchr(text, ':');
    if (!colon || colon - text >= (long)sizeof(host)) return -1;
    memcpy(host, text, colon - text);
    host[colon - text] = 0;
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_port = htons(atoi(colon + 1));
    return inet_pton(AF_INET, host, &addr->sin_addr) == 1 ? 0 : -1;
}

/* A socket is registered once, with the union of what its two directions wait for. */
static void update(direction *d) {
    /* d->src is read by d and written by d->peer; one registration per socket. */
    direction *p = d->peer;
    uint32_t ev = (d->reading ? EPOLLIN : 0) | (p->writing ? EPOLLOUT : 0);
    struct epoll_event e = {.events = ev, .data.ptr = d};
    epoll_ctl(epfd, EPOLL_CTL_MOD, d->src, &e);
}

static listener *listener_of(void *ptr) {
    listener *l = ptr;
    return l >= listeners && l < listeners + nlisteners ? l : NULL;
}

/* The timer is armed for one chunk at a time: the one whose release comes first. */
static chunk *armed_chunk, *fired_chunk; /* fired: the timer woke the loop for it */
static uint64_t armed_at, fired_armed_at;

/* Wake the loop when the next held chunk is due, early by its direction's lateness. */
static uint64_t release_at(direction *d, chunk *c) {
    return c->due_ns - (uint64_t)d->early_ns;
}

static void arm_timer(uint64_t now) {
    uint64_t earliest = 0;
    for (size_t i = 0; i < ndirs; i++) {
        for (chunk *c = dirs[i]->head; c; c = c->next)
            if (release_at(dirs[i], c) > now) {
                if (!earliest || release_at(dirs[i], c) < earliest) {
                    earliest = release_at(dirs[i], c);
                    armed_chunk = c;
                }
                break;
            }
    }
    armed_at = earliest;
    if (!earliest) armed_chunk = NULL;
    struct itimerspec its = {0};
    if (earliest) {
        its.it_value.tv_sec = earliest / 1000000000ull;
        its.it_value.tv_nsec = earliest % 1000000000ull;
    }
    timerfd_settime(timer, TFD_TIMER_ABSTIME, &its, NULL);
}

static void add_direction(direction *d) {
    if (ndirs == capdirs) {
        capdirs = capdirs ? capdirs * 2 : 16;
        dirs = realloc(dirs, capdirs * sizeof(*dirs));
    }
    dirs[ndirs++] = d;
}

static void accept_one(listener *l) {
    int client = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK);
    if (client < 0) return;
    /* Non-blocking: a target that does not answer must not stall every other
     * connection. Until it connects, sends wait for EPOLLOUT like any full socket; a
     * refusal shows up as EPOLLERR/EPOLLHUP on it. */
    int upstream = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (upstream < 0 ||
        (connect(upstream, (struct sockaddr *)&l->target, sizeof(l->target)) < 0 &&
         errno != EINPROGRESS)) {
        close(client);
        if (upstream >= 0) close(upstream);
        return;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(client, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    setsockopt(upstream, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    direction *a = calloc(1, sizeof(direction)), *b = calloc(1, sizeof(direction));
    if (!a || !b) die("calloc");
    a->src = client; a->dst = upstream; b->src = upstream; b->dst = client;
    a->peer = b; b->peer = a;
    a->port = b->port = ntohs(l->target.sin_port);
    a->reading = b->reading = 1;
    add_direction(a);
    add_direction(b);
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = a};
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = b};
    epoll_ctl(epfd, EPOLL_CTL_ADD, client, &e1);
    epoll_ctl(epfd, EPOLL_CTL_ADD, upstream, &e2);
}

/* The chunk the timer was armed for (at `armed`, `early` before it was due) leaves
 * now: learn how late it left against the armed time, the timer's lateness and the
 * loop's own time to send, and arm d's timer earlier by the running mean of that, so
 * that releases are on time on average. Only such chunks are learnt from: one that
 * waited behind a full link is late for another reason. */
static void left(direction *d, chunk *c, uint64_t armed) {
    uint64_t sent_at = now_ns();
    int64_t late = (int64_t)(sent_at - armed);
    int64_t off = (int64_t)(sent_at - c->due_ns);
    d->wakes++;
    d->timer_late_sum_ns += late;
    d->left_sum_ns += off;
    if (off > d->left_max_ns) d->left_max_ns = off;
    int64_t early = d->early_ns + (late - d->early_ns) / 8;
    if (early > (int64_t)delay_ns / 2) early = (int64_t)delay_ns / 2;
    if (early > EARLY_MAX_NS) early = EARLY_MAX_NS;
    d->early_ns = early < 0 ? 0 : early;
}

/* Write what is due from d's queue to d->dst; shut d->dst's sending side when done. */
static void flush(direction *d, uint64_t now) {
    while (d->head && release_at(d, d->head) <= now) {
        chunk *c = d->head;
        ssize_t n = send(d->dst, c->data + c->sent, c->len - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN) { d->writing = 1; update(d->peer); return; }
            d->src_done = 1; /* the receiver is gone: drop what is held, read no more */
            while (d->head) { c = d->head; d->head = c->next; free(c); }
            d->tail = NULL;
            d->queued = 0;
            if (d->reading) { d->reading = 0; update(d); }
            break;
        }
        if (c == fired_chunk && c->sent == 0) left(d, c, fired_armed_at);
        c->sent += n;
        if (c->sent < c->len) { d->writing = 1; update(d->peer); return; }
        d->head = c->next;
        if (!d->head) d->tail = NULL;
        d->queued -= c->len;
        free(c);
    }
    if (d->writing) { d->writing = 0; update(d->peer); }
    if (!d->reading && !d->src_done && d->queued < MAX_QUEUED) { d->reading = 1; update(d); }
    if (d->src_done && !d->head && !d->closed) {
        shutdown(d->dst, SHUT_WR);
        d->closed = 1;
    }
}

/* When the last of the bytes read arrived at the socket (the kernel's receive stamp),
 * on the monotonic clock; `now` where there is none. A wire delays bytes from when they
 * were sent, not from when the relay got round to reading them: on a virtual machine
 * the relay woke 3-20 us after the bytes arrived. */
static uint64_t arrival_ns(struct msghdr *msg, uint64_t now) {
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS) continue;
        struct timespec stamp, real;
        memcpy(&stamp, CMSG_DATA(cm), sizeof(stamp));
        clock_gettime(CLOCK_REALTIME, &real);
        uint64_t mono = now_ns();
        int64_t age = ((int64_t)real.tv_sec - stamp.tv_sec) * 1000000000ll +
                      (real.tv_nsec - stamp.tv_nsec);
        if (age >= 0 && (uint64_t)age < mono && mono - (uint64_t)age < now)
            return mono - (uint64_t)age;
    }
    return now;
}

static void read_one(direction *d, uint64_t now) {
    chunk *c = malloc(sizeof(chunk) + CHUNK);
    if (!c) die("malloc");
    char control[256];
    struct iovec iov = {.iov_base = c->data, .iov_len = CHUNK};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof(control)};
    ssize_t n = recvmsg(d->src, &msg, 0);
    uint64_t arrived = n > 0 ? arrival_ns(&msg, now) : now;
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) { free(c); return; }
    if (n <= 0) {
        free(c);
        d->src_done = 1;
        d->reading = 0;
        update(d);
        return;
    }
    chunk *fit = realloc(c, sizeof(chunk) + n);
    c = fit ? fit : c;
    c->next = NULL;
    c->len = n;
    c->sent = 0;
    d->chunks++;
    d->bytes += n;
    c->due_ns = arrived + delay_ns;
    if (d->tail) d->tail->next = c; else d->head = c;
    d->tail = c;
    d->queued += n;
    if (d->queued >= MAX_QUEUED) { d->reading = 0; update(d); }
}

/* d->src hung up or failed, and all it sent has been read: nothing more comes from it
 * and nothing can be written to it. Stop watching it (its events would repeat until it
 * is closed), and drop what waits to be written to it. */
static void hang_up(direction *d) {
    direction *p = d->peer; /* writes to d->src */
    d->src_done = 1;
    d->reading = 0;
    epoll_ctl(epfd, EPOLL_CTL_DEL, d->src, NULL);
    while (p->head) {
        chunk *c = p->head;
        p->head = c->next;
        free(c);
    }
    p->tail = NULL;
    p->queued = 0;
    p->writing = 0;
    p->src_done = 1;
    p->closed = 1;
}

/* Close and forget connections whose two directions are both finished (directions are
 * added in pairs, so a connection's two stay next to each other). */
static void reap(void) {
    size_t kept = 0;
    for (size_t i = 0; i + 1 < ndirs; i += 2) {
        direction *a = dirs[i], *b = dirs[i + 1];
        if (a->closed && b->closed) {
            stats(a, "a_to_b");
            stats(b, "b_to_a");
            close(a->src);
            close(b->src);
            free(a);
            free(b);
            continue;
        }
        dirs[kept++] = a;
        dirs[kept++] = b;
    }
    ndirs = kept;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s DELAY_US LISTEN_IP:PORT=TARGET_IP:PORT [...]\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_term);
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    /* The relay is the emulated wire: it must release a chunk when it is due, also when
     * other work keeps the CPUs busy. A real-time priority (where allowed: root) lets
     * its timer preempt ordinary tasks; it never spins, so it takes little. */
    struct sched_param rt = {.sched_priority = 10};
    const char *priority = sched_setscheduler(0, SCHED_FIFO, &rt) == 0 ? "real-time" : "normal";
    delay_ns = (uint64_t)(atof(argv[1]) * 1000.0);
    if ((epfd = epoll_create1(0)) < 0) die("epoll_create1");
    if ((timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK)) < 0) die("timerfd_create");
    struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &timer_tag};
    epoll_ctl(epfd, EPOLL_CTL_ADD, timer, &tev);
    for (int i = 2; i < argc && nlisteners < MAX_LISTENERS; i++) {
        char *eq = strchr(argv[i], '=');
        struct sockaddr_in listen_at;
        listener *l = &listeners[nlisteners];
        if (!eq) { fprintf(stderr, "bad mapping %s\n", argv[i]); return 2; }
        *eq = 0;
        if (parse(argv[i], &listen_at) || parse(eq + 1, &l->target)) {
            fprintf(stderr, "bad address in %s\n", argv[i]);
            return 2;
        }
        l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        int one = 1;
        setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(l->fd, (struct sockaddr *)&listen_at, sizeof(listen_at)) < 0) die("bind");
        if (listen(l->fd, 64) < 0) die("listen");
        nlisteners++;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = l};
        epoll_ctl(epfd, EPOLL_CTL_ADD, l->fd, &e);
    }
    printf("relay ready (%s priority)\n", priority);
    fflush(stdout);
    struct epoll_event events[64];
    for (;;) {
        int n = epoll_wait(epfd, events, 64, -1);
        if (stopping) {
            for (size_t i = 0; i + 1 < ndirs; i += 2) {
                stats(dirs[i], "a_to_b");
                stats(dirs[i + 1], "b_to_a");
            }
            return 0;
        }
        if (n < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
        uint64_t now = now_ns();
        for (int i = 0; i < n; i++) {
            void *ptr = events[i].data.ptr;
            if (ptr == &timer_tag) {
                uint64_t ticks;
                (void)!read(timer, &ticks, sizeof(ticks));
                if (armed_chunk && now >= armed_at) {
                    fired_chunk = armed_chunk;
                    fired_armed_at = armed_at;
                }
                continue;
            }
            listener *l = listener_of(ptr);
            if (l) {
                accept_one(l);
                continue;
            }
            direction *d = ptr; /* events on d->src: readable for d, writable for d->peer */
            uint32_t ev = events[i].events;
            if ((ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !d->src_done) read_one(d, now);
            if (ev & (EPOLLHUP | EPOLLERR)) {
                if (d->src_done) hang_up(d); /* read to the end: now forget the socket */
                continue;
            }
            if (ev & EPOLLOUT) flush(d->peer, now);
        }
        now = now_ns();
        for (size_t i = 0; i < ndirs; i++) flush(dirs[i], now);
        fired_chunk = NULL;
        reap();
        arm_timer(now);
    }
}
