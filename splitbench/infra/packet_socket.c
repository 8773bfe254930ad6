/*
 * splitbench's packet-socket helper, for a host A where splitbench does not run as root.
 *
 *   packet-socket CHANNEL_FD RECEIVE_BUFFER
 *
 * Opens one packet socket (AF_PACKET, SOCK_DGRAM, every protocol) with a filter that
 * keeps nothing, sizes its receive buffer, hands it to the caller over the Unix socket
 * CHANNEL_FD (SCM_RIGHTS) and exits. The caller attaches its own filter (no capability
 * needed for that) and reads the packet clock and the RPC turns from it (packets.py).
 *
 * It is installed root-owned with cap_net_raw (to open the socket) and cap_net_admin (to
 * size its buffer past net.core.rmem_max: a long cell's packets wait in it), executable
 * by one user's group only (`python -m splitbench packet-helper`): every other user is
 * refused by the file's mode, and the program does nothing else with its capabilities.
 */
#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define MOST_BUFFER (256L << 20)

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

int main(int argc, char **argv) {
    char *end;
    if (argc != 3) {
        fprintf(stderr, "usage: %s CHANNEL_FD RECEIVE_BUFFER\n", argv[0]);
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
    int fd = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_ALL));
    if (fd < 0) {
        perror("packet-socket: socket(AF_PACKET)");
        return 1;
    }
    /* Nothing is queued before the caller's own filter replaces this one. */
    struct sock_filter keep_nothing = BPF_STMT(BPF_RET | BPF_K, 0);
    struct sock_fprog program = {.len = 1, .filter = &keep_nothing};
    if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) != 0) {
        perror("packet-socket: SO_ATTACH_FILTER");
        return 1;
    }
    int size = (int)buffer;
    if (size > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0
        && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size) != 0) {
        perror("packet-socket: SO_RCVBUF");
        return 1;
    }
    if (hand_over((int)channel, fd) != 0) {
        perror("packet-socket: sendmsg");
        return 1;
    }
    return 0;
}
