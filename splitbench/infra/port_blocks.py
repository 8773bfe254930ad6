"""Where splitbench's servers listen: PORT_BLOCKS blocks of PORT_BLOCK ports from
FIRST_PORT, one block a run (links/ports.py chooses it, links/link.py lays it out). The
packet helper (packet_socket.c) is compiled with this range and shows nothing outside it.

The blocks (20480-29439) lie below Linux's default ephemeral range (32768-60999): a port
the kernel gave an outgoing connection stays in TIME_WAIT for a minute after it closes,
and keeps a server from binding that port, SO_REUSEADDR or not (links/ports.py also reads
each host's range).
"""

PORT_BLOCK = 128
FIRST_PORT = 20480
PORT_BLOCKS = 70
LAST_PORT = FIRST_PORT + PORT_BLOCK * PORT_BLOCKS - 1
