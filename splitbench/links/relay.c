/*
 * splitbench's delay relay: a TCP relay that holds every byte back by a fixed delay in
 * each direction, for kernels without netem (see relay.py, which builds and runs this).
 *
 *   relay DELAY_US LISTEN_IP:PORT=TARGET_IP:PORT [...]
 *
 * One thread, one epoll loop. Each chunk read is released DELAY_US after it was read; a
 * timerfd wakes the loop for the earliest release, and the thread's timer slack is 1 us.
 * A Python version of the same loop released chunks 26 us late at the median and 93 us
 * at p90 on the development VM, more than the smallest delays it emulates; a decode step
 * sends several messages, so that lateness added up beyond what a single-message probe
 * measured.
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

typedef struct chunk {
    struct chunk *next;
    uint64_t due_ns;
    size_t len, sent;
    char data[];
} chunk;

typedef struct direction {
    int src, dst;
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

/* Wake the loop when the next held chunk is due. */
static void arm_timer(uint64_t now) {
    uint64_t earliest = 0;
    for (size_t i = 0; i < ndirs; i++) {
        for (chunk *c = dirs[i]->head; c; c = c->next)
            if (c->due_ns > now) {
                if (!earliest || c->due_ns < earliest) earliest = c->due_ns;
                break;
            }
    }
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
    direction *a = calloc(1, sizeof(direction)), *b = calloc(1, sizeof(direction));
    if (!a || !b) die("calloc");
    a->src = client; a->dst = upstream; b->src = upstream; b->dst = client;
    a->peer = b; b->peer = a;
    a->reading = b->reading = 1;
    add_direction(a);
    add_direction(b);
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = a};
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = b};
    epoll_ctl(epfd, EPOLL_CTL_ADD, client, &e1);
    epoll_ctl(epfd, EPOLL_CTL_ADD, upstream, &e2);
}

/* Write what is due from d's queue to d->dst; shut d->dst's sending side when done. */
static void flush(direction *d, uint64_t now) {
    while (d->head && d->head->due_ns <= now) {
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

static void read_one(direction *d, uint64_t now) {
    chunk *c = malloc(sizeof(chunk) + CHUNK);
    if (!c) die("malloc");
    ssize_t n = recv(d->src, c->data, CHUNK, 0);
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
    c->due_ns = now + delay_ns;
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
        if (n < 0) { if (errno == EINTR) continue; die("epoll_wait"); }
        uint64_t now = now_ns();
        for (int i = 0; i < n; i++) {
            void *ptr = events[i].data.ptr;
            if (ptr == &timer_tag) {
                uint64_t ticks;
                (void)!read(timer, &ticks, sizeof(ticks));
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
        reap();
        arm_timer(now);
    }
}
