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
 * No chunk ever leaves before it is due (netem's contract: an emulated link may be late
 * by a bounded amount, never faster than the link it models). A read or a writable
 * socket only sends chunks whose due time has come.
 *
 * A timer on a virtual machine fires late: 20-50 us on the development VM, more the
 * longer the CPU slept (a 2 ms hold was released 46 us late on average, a 0.5 ms one
 * 25 us), and a busy CPU less. That lateness was part of every emulated round trip, so
 * a link's latency depended on how idle the machine was, not only on its delay. Each
 * direction therefore arms its timer early by the lateness its recent wake-ups showed
 * (their running mean plus their running mean deviation, as TCP estimates a round
 * trip's timeout; at most EARLY_MAX_NS and half the delay), and a loop that wakes
 * before the chunk is due waits out the rest on the clock (a spin of at most
 * EARLY_MAX_NS) and sends it at due. Only the rest is spun, not the whole hold: spinning
 * from arrival would take host B's CPU, where the relay runs, while B works on an
 * earlier message. What is learnt is the wake-up's lateness (ready to send, minus the
 * time the timer was armed for), never the time after the spin, which the early arming
 * itself sets.
 * On exit (SIGTERM) and for each connection that ends, the log gets, per direction, the
 * earliest any chunk left against its due time (never below +0), when the chunks the
 * timer released left against their due time, when they would have left without the
 * early arming, and how long the loop waited out before due on average.
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
/* The most a timer is armed early, and so the longest the loop spins waiting out a
 * chunk's due time. Above the lateness a virtual machine's timer shows (docs/method.md),
 * so the early arming can make up for all of it; half the delay caps it too. */
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
    int64_t early_ns; /* how much earlier than due to arm the timer: late_mean + late_dev */
    int64_t late_mean_ns, late_dev_ns; /* the timer's wake-ups: running mean, deviation */
    uint64_t chunks, bytes;
    uint64_t sends; /* chunks whose first byte was sent */
    int64_t earliest_ns; /* the least of their (first send - due): never below 0 */
    uint64_t wakes; /* chunks the timer released (on time or not) */
    int64_t timer_late_sum_ns, left_sum_ns, left_max_ns; /* left: from due, at release */
    uint64_t waited_sum_ns; /* spun before due, over the chunks the timer released */
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
    fprintf(stderr, "relay port %d %s: %llu chunks, %llu bytes, earliest %+.1f us from due; "
            "%llu released by the timer, %+.1f us from due on average (worst %+.1f), "
            "%+.1f without arming it early, %.1f us waited out before due\n", d->port, way,
            (unsigned long long)d->chunks, (unsigned long long)d->bytes,
            d->sends ? d->earliest_ns / 1e3 : 0.0, (unsigned long long)d->wakes,
            d->left_sum_ns / 1e3 / wakes, d->left_max_ns / 1e3,
            d->timer_late_sum_ns / 1e3 / wakes, d->waited_sum_ns / 1e3 / wakes);
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

/* The timer is armed for one chunk at a time: the one whose wake-up comes first. A
 * chunk is named by its direction and due time (a pointer to it could be freed and
 * reused before the timer fires). `learn`: the timer slept (armed for a time still to
 * come), so its lateness is a wake-up's, worth learning from. */
typedef struct { direction *d; uint64_t due, at, ready, waited; int learn; } timer_mark;
static timer_mark armed, fired; /* fired: the timer woke this pass of the loop (d set) */

/* When to wake the loop for a held chunk: early by its direction's learnt lateness. */
static uint64_t release_at(direction *d, chunk *c) {
    return c->due_ns - (uint64_t)d->early_ns;
}

/* Arm the timer for the first chunk, over all directions, not yet due. One whose
 * wake-up time has passed already (a read brought it in late) fires at once. */
static void arm_timer(uint64_t now) {
    armed.d = NULL;
    for (size_t i = 0; i < ndirs; i++) {
        for (chunk *c = dirs[i]->head; c; c = c->next)
            if (c->due_ns > now) {
                if (!armed.d || release_at(dirs[i], c) < armed.at) {
                    armed.d = dirs[i];
                    armed.due = c->due_ns;
                    armed.at = release_at(dirs[i], c);
                }
                break;
            }
    }
    struct itimerspec its = {0};
    if (armed.d) {
        armed.learn = armed.at > now;
        uint64_t at = armed.learn ? armed.at : now; /* never 0, which would disarm it */
        its.it_value.tv_sec = at / 1000000000ull;
        its.it_value.tv_nsec = at % 1000000000ull;
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

/* The timer woke the loop `late` ns after the time it was armed for: fold that into
 * d's running mean and mean deviation of its wake-ups' lateness (1/8 of each new one,
 * as TCP's round-trip estimator), and arm d's timer early by their sum from now on: the
 * mean alone would leave half the wake-ups late by their jitter. A wake-up later than
 * EARLY_MAX_NS counts as that: no arming can make up for it, and a single one (a CPU
 * taken for milliseconds) must not set the spin of the releases after it. */
static void learn(direction *d, int64_t late) {
    if (late > EARLY_MAX_NS) late = EARLY_MAX_NS;
    int64_t error = late - d->late_mean_ns;
    d->late_mean_ns += error / 8;
    d->late_dev_ns += ((error < 0 ? -error : error) - d->late_dev_ns) / 8;
    int64_t early = d->late_mean_ns + d->late_dev_ns;
    if (early > (int64_t)delay_ns / 2) early = (int64_t)delay_ns / 2;
    if (early > EARLY_MAX_NS) early = EARLY_MAX_NS;
    d->early_ns = early < 0 ? 0 : early;
}

/* The earliest due time after `now` of a chunk next to leave its direction (its head,
 * unsent, its socket not full); 0 if there is none. */
static uint64_t next_due(uint64_t now) {
    uint64_t first = 0;
    for (size_t i = 0; i < ndirs; i++) {
        chunk *c = dirs[i]->head;
        if (c && !c->sent && !dirs[i]->writing && c->due_ns > now &&
            (!first || c->due_ns < first))
            first = c->due_ns;
    }
    return first;
}

/* The timer woke the loop for `fired`'s chunk and the loop is ready to send: learn the
 * wake-up's lateness (now, not after the spin below, which the early arming sets), then
 * spin on the clock until the first chunk next to leave is due, if that comes no later
 * than the fired one (at most EARLY_MAX_NS: the timer is armed no earlier than that).
 * The first, not the fired one: another direction's chunk due sooner must not wait
 * out the fired one's time. */
static void wait_out_fired(void) {
    fired.ready = now_ns();
    fired.waited = 0;
    if (fired.learn) learn(fired.d, (int64_t)(fired.ready - fired.at));
    uint64_t until = next_due(fired.ready);
    if (!until || until > fired.due) return; /* due already, or waits behind a full link */
    uint64_t t = fired.ready;
    while (t < until && t - fired.ready < EARLY_MAX_NS) t = now_ns();
    fired.waited = t - fired.ready;
}

/* Chunk c's first byte is being sent at `at`: the earliest against due, and for the
 * chunk the timer woke the loop for, how it left (see the top). */
static void leaving(direction *d, chunk *c, uint64_t at) {
    int64_t off = (int64_t)(at - c->due_ns);
    if (!d->sends++ || off < d->earliest_ns) d->earliest_ns = off;
    if (d != fired.d || c->due_ns != fired.due || !fired.ready) return;
    d->wakes++;
    d->timer_late_sum_ns += (int64_t)(fired.ready - fired.at);
    d->left_sum_ns += off;
    if (off > d->left_max_ns) d->left_max_ns = off;
    d->waited_sum_ns += fired.waited;
}

/* Write what is due by `now` from d's queue to d->dst (never a chunk not yet due);
 * shut d->dst's sending side when done. */
static void flush(direction *d, uint64_t now) {
    while (d->head && d->head->due_ns <= now) {
        chunk *c = d->head;
        uint64_t first_byte_at = c->sent ? 0 : now_ns(); /* 0: under way already */
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
        if (first_byte_at) leaving(d, c, first_byte_at);
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
 * on the monotonic clock; `read_at`, the clock read once recvmsg returned, where there
 * is none. A wire delays bytes from when they were sent, not from when the relay got
 * round to reading them: on a virtual machine the relay woke 3-20 us after the bytes
 * arrived. Neither may be a clock read before recvmsg (the loop's `now`): bytes that
 * came after it, while the relay was held (a busy host, a hypervisor's steal), would be
 * due that much early. */
static uint64_t arrival_ns(struct msghdr *msg, uint64_t read_at) {
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS) continue;
        struct timespec stamp, real;
        memcpy(&stamp, CMSG_DATA(cm), sizeof(stamp));
        clock_gettime(CLOCK_REALTIME, &real);
        uint64_t mono = now_ns();
        int64_t age = ((int64_t)real.tv_sec - stamp.tv_sec) * 1000000000ll +
                      (real.tv_nsec - stamp.tv_nsec);
        if (age >= 0 && (uint64_t)age < mono && mono - (uint64_t)age <= read_at)
            return mono - (uint64_t)age;
    }
    return read_at;
}

/* Only for the relay's own test: hold each read this long after the loop woke, as a
 * busy host does, so that bytes arrive between the two (cc -DREAD_PAUSE_NS=...). */
#ifndef READ_PAUSE_NS
#define READ_PAUSE_NS 0
#endif

static void read_one(direction *d, uint64_t woke) {
    if (READ_PAUSE_NS)
        while (now_ns() - woke < (uint64_t)READ_PAUSE_NS) {}
    chunk *c = malloc(sizeof(chunk) + CHUNK);
    if (!c) die("malloc");
    char control[256];
    struct iovec iov = {.iov_base = c->data, .iov_len = CHUNK};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof(control)};
    ssize_t n = recvmsg(d->src, &msg, 0);
    uint64_t read_at = now_ns();
    uint64_t arrived = n > 0 ? arrival_ns(&msg, read_at) : read_at;
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
    /* SIGTERM is let in only while the loop waits (epoll_pwait): one that came while
     * the loop was busy would set `stopping` just after it was checked, and the next
     * wait, with no traffic left, would never end. */
    sigset_t term, waiting;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, &waiting);
    sigdelset(&waiting, SIGTERM);
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
    /* The relay is the emulated wire: it must release a chunk when it is due, also when
     * other work keeps the CPUs busy. A real-time priority (where allowed: root) lets
     * its timer preempt ordinary tasks; it spins only the rest of a wake-up before due
     * (a few us on average, at most EARLY_MAX_NS), so it takes little. */
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
        int n = epoll_pwait(epfd, events, 64, -1, &waiting);
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
                if (armed.d && now >= armed.at) {
                    fired = armed;
                    fired.ready = 0; /* set once the loop is ready to send */
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
        if (fired.d) wait_out_fired();
        now = now_ns();
        for (size_t i = 0; i < ndirs; i++) flush(dirs[i], now);
        fired.d = NULL;
        reap();
        arm_timer(now);
    }
}
