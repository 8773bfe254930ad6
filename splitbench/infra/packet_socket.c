/*
 * splitbench's packet-socket helper, for a host A where splitbench does not run as root.
 *
 *   packet-socket CHANNEL_FD RECEIVE_BUFFER PROGRAM
 *
 * Opens one packet socket (AF_PACKET, SOCK_DGRAM) that sees only IPv4 TCP segments to or
 * from a port of splitbench's port blocks (FIRST_PORT to LAST_PORT, fixed when it is
 * compiled), hands it to the caller over the Unix socket CHANNEL_FD (SCM_RIGHTS) and
 * exits. PROGRAM is the caller's classic BPF filter (hex, 8 bytes an instruction, as
 * struct sock_filter): the helper runs it only on segments its own check let through,
 * attaches the two as one and locks the filter (SO_LOCK_FILTER), so the caller cannot
 * replace or remove it. The socket starts receiving only after that (it is bound to
 * every protocol last): no packet reaches it unfiltered.
 *
 * What a user who may run it sees: the first bytes of TCP segments to or from ports
 * FIRST_PORT-LAST_PORT on every interface of the host, loopback included (another
 * user's connection on such a port too), nothing else; it sends nothing.
 *
 * It is installed root-owned with cap_net_raw only, executable by one group
 * (splitbench-packets): every other user is refused by the file's mode. Without
 * cap_net_admin its receive buffer is at most net.core.rmem_max: the caller reads it
 * while a request runs.
 */
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef FIRST_PORT
#error "compile with -DFIRST_PORT=... -DLAST_PORT=... (splitbench's port blocks)"
#endif
#ifndef SO_LOCK_FILTER
#define SO_LOCK_FILTER 44
#endif

#define MOST_BUFFER (256L << 20)
#define PREFIX 16

static int hand_over(int channel, int fd) {
    char byte = 'p';
    struct iovec data = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr align;
        char room[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1,
                             .msg_control = control.room,
                             .msg_controllen = sizeof control.room};
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &fd, sizeof(int));
    return sendmsg(channel, &message, 0) == 1 ? 0 : -1;
}

/* The helper's own check, which every segment passes before the caller's program runs:
 * IPv4, TCP, not a later fragment, the source or the destination port in the blocks.
 * Offsets count from the IP header (SOCK_DGRAM). Jumps count from the next instruction;
 * the caller's program follows at PREFIX, with A and X zero as at any program's start. */
static void own_check(struct sock_filter *out) {
    struct sock_filter check[PREFIX] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, SKF_AD_OFF + SKF_AD_PROTOCOL),
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 11),       /* -> 13 */
        /* 2 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),
        /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 6, 0, 9),               /* -> 13 */
        /* 4 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),
        /* 5 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 7, 0),         /* -> 13 */
        /* 6 */ BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),
        /* 7 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 0),                      /* source */
        /* 8 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_PORT, 0, 1),      /* -> 10 */
        /* 9 */ BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, LAST_PORT, 0, 4),       /* -> 14 */
        /* 10 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),                     /* destination */
        /* 11 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_PORT, 0, 1),     /* -> 13 */
        /* 12 */ BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, LAST_PORT, 0, 1),      /* -> 14 */
        /* 13 */ BPF_STMT(BPF_RET | BPF_K, 0),
        /* 14 */ BPF_STMT(BPF_LD | BPF_IMM, 0),
        /* 15 */ BPF_STMT(BPF_LDX | BPF_IMM, 0),
    };
    memcpy(out, check, sizeof check);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The caller's program from its hex; its number of instructions, or -1. */
static long parse_program(const char *hex, struct sock_filter *out, long room) {
    size_t length = strlen(hex);
    size_t bytes = length / 2;
    if (length % 2 || bytes == 0 || bytes % sizeof(struct sock_filter)
        || (long)(bytes / sizeof(struct sock_filter)) > room)
        return -1;
    unsigned char *raw = (unsigned char *)out;
    for (size_t i = 0; i < bytes; i++) {
        int high = hex_digit(hex[2 * i]), low = hex_digit(hex[2 * i + 1]);
        if (high < 0 || low < 0)
            return -1;
        raw[i] = (unsigned char)(high << 4 | low);
    }
    return (long)(bytes / sizeof(struct sock_filter));
}

int main(int argc, char **argv) {
    char *end;
    if (argc != 4) {
        fprintf(stderr, "usage: %s CHANNEL_FD RECEIVE_BUFFER PROGRAM\n", argv[0]);
        return 2;
    }
    long channel = strtol(argv[1], &end, 10);
    if (*end || channel < 3 || channel > 1 << 20) {
        fprintf(stderr, "packet-socket: CHANNEL_FD must be a descriptor number above 2\n");
        return 2;
    }
    long buffer = strtol(argv[2], &end, 10);
    if (*end || buffer < 0 || buffer > MOST_BUFFER) {
        fprintf(stderr, "packet-socket: RECEIVE_BUFFER must be 0 to %ld bytes\n", MOST_BUFFER);
        return 2;
    }
    static struct sock_filter code[BPF_MAXINSNS];
    own_check(code);
    long theirs = parse_program(argv[3], code + PREFIX, BPF_MAXINSNS - PREFIX);
    if (theirs < 0) {
        fprintf(stderr, "packet-socket: PROGRAM must be 1 to %d classic BPF instructions "
                "in lower-case hex\n", BPF_MAXINSNS - PREFIX);
        return 2;
    }
    /* Protocol 0: the socket receives nothing until it is bound, after its filter. */
    int fd = socket(AF_PACKET, SOCK_DGRAM, 0);
    if (fd < 0) {
        perror("packet-socket: socket(AF_PACKET)");
        return 1;
    }
    struct sock_fprog program = {.len = (unsigned short)(PREFIX + theirs), .filter = code};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) != 0) {
        perror("packet-socket: SO_ATTACH_FILTER (the kernel refused the program)");
        return 1;
    }
    int locked = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_LOCK_FILTER, &locked, sizeof locked) != 0) {
        perror("packet-socket: SO_LOCK_FILTER");
        return 1;
    }
    int size = (int)buffer;
    if (size > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size) != 0) {
        perror("packet-socket: SO_RCVBUF");
        return 1;
    }
    struct sockaddr_ll every = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL)};
    if (bind(fd, (struct sockaddr *)&every, sizeof every) != 0) {
        perror("packet-socket: bind");
        return 1;
    }
    if (hand_over((int)channel, fd) != 0) {
        perror("packet-socket: sendmsg");
        return 1;
    }
    return 0;
}
