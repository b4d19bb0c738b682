"""Process helpers: ports handed to services and test configs."""

from __future__ import annotations

import socket

from agora.stack.procs import free_port


def test_free_port_never_hands_out_the_same_port_twice():
    # The OS picks a random free port for each bind to 0; among 500 draws a repeat is all but
    # certain (the birthday bound over ~28k ephemeral ports), and one made a test config put
    # two services on one port.
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    for port in ports[:20]:  # and each really is free to listen on
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
