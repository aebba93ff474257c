#!/usr/bin/env python3
"""Share latency at a server's port, on the wire: for each `mining.submit` a client sends to
127.0.0.1:PORT, the time from the request's packet to the packet carrying its answer, both
timestamped by the kernel as they cross the loopback device.

This is what the server adds, and nothing else: the clients' own scheduling (a fleet of
simulated devices sharing a core with other load) and the capture's scheduling are outside the
two timestamps. Used by bench-translator.sh next to the devices' own share_sent -> share_result.

usage: wire-latency.py PORT WAIT_S WINDOW_S > out.json
Waits WAIT_S, then captures for WINDOW_S; prints one JSON object:
  {"samples": [[ms, nonce, accepted], ...], "packets": N, "drops": N, "unmatched": N,
   "bad_lines": N}
Needs CAP_NET_RAW (root); exits 2 with a message on stderr without it.
"""
import json
import select
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SO_TIMESTAMPNS = 35
SO_RCVBUFFORCE = 33
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_HOST = 0  # lo shows each packet twice: outgoing (4) and incoming (0); keep one


def main():
    port, wait_s, window_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    except PermissionError as e:
        print(f"wire-latency: no packet capture here ({e})", file=sys.stderr)
        sys.exit(2)
    s.bind(("lo", 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    try:
        s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
    time.sleep(wait_s)
    # What queued during the wait is before the window: read it and drop it, then zero the
    # drop counter (reading the statistics resets them).
    s.setblocking(False)
    try:
        while True:
            s.recv(65536)
    except BlockingIOError:
        pass
    s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)

    pending = {}  # (client port, request id) -> (ts_ns, nonce)
    partial = {}  # (client port, direction) -> bytes of an unfinished line
    samples = []
    packets = unmatched = bad = 0
    cmsg_space = socket.CMSG_SPACE(16)
    deadline = time.monotonic() + window_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if not select.select([s], [], [], min(left, 0.2))[0]:
            continue
        while True:
            try:
                data, anc, _flags, addr = s.recvmsg(65536, cmsg_space)
            except BlockingIOError:
                break
            if addr[2] != PACKET_HOST:
                continue
            ts = None
            for level, kind, val in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", val[:16])
                    ts = sec * 1_000_000_000 + nsec
            # lo's link header is a 14-byte Ethernet header; IPv4 and TCP only.
            if ts is None or len(data) < 34 or data[12:14] != b"\x08\x00" or data[23] != 6:
                continue
            ihl = (data[14] & 0x0F) * 4
            tcp = 14 + ihl
            sport, dport = struct.unpack("!HH", data[tcp:tcp + 4])
            if port not in (sport, dport):
                continue
            payload = data[tcp + (data[tcp + 12] >> 4) * 4:struct.unpack("!H", data[16:18])[0] + 14]
            if not payload:
                continue
            packets += 1
            request = dport == port
            key = (sport if request else dport, request)
            buf = partial.pop(key, b"") + payload
            *lines, rest = buf.split(b"\n")
            if rest:
                partial[key] = rest
            for line in lines:
                if request and b"mining.submit" not in line:
                    continue
                if not request and b"mining." in line:
                    continue  # notify, set_difficulty, set_extranonce: not answers
                try:
                    m = json.loads(line)
                except ValueError:
                    bad += 1
                    continue
                if request:
                    params = m.get("params") or []
                    try:
                        nonce = int(params[4], 16)  # as the events carry it: a u32
                    except (IndexError, TypeError, ValueError):
                        nonce = None
                    pending[(key[0], m.get("id"))] = (ts, nonce)
                else:
                    sent = pending.pop((key[0], m.get("id")), None)
                    if sent is None:
                        unmatched += 1
                        continue
                    samples.append([(ts - sent[0]) / 1e6, sent[1], m.get("result") is True, sent[0]])
    drops = struct.unpack("II", s.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))[1]
    print(json.dumps({"samples": samples, "packets": packets, "drops": drops,
                      "unmatched": unmatched, "bad_lines": bad}))


if __name__ == "__main__":
    main()
