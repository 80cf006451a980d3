"""Part of hydra_notify_test.py: the order of the events around blocked
clients and moves, keymiss, and SETBIT, each case run on Hydra and on
redis-server and compared message for message (keyspace and keyevent
channels, in the order one PSUBSCRIBE * subscriber gets them).

  blocking(ports, shards)  a client blocked (BLPOP, BRPOP, BLMPOP, BLMOVE,
      BRPOPLPUSH, BZPOPMIN, BZPOPMAX, BZMPOP) and a write that wakes it: the
      write's events first, then the served pop's (and, for a move, the
      destination's push before the source's pop, as Redis's
      lmoveHandlePush), including a move whose pushed element serves the
      next blocked client, the same key as source and destination, two
      waiters on one key; the blocked clients' replies too. Key names put the keys of a case on different shards, and each
      client has its own connection (so, on Hydra, its own thread's loop
      for as many as it has threads).
  moves(ports, shards)  LMOVE and RPOPLPUSH, keys on different shards and the
      same key: the push's event, then the pop's, then del if emptied.
  keymiss(ports)  each read of a missing key (GET, MGET, HGET, LRANGE,
      TOUCH, COPY's source, SORT's BY and GET keys...) and of an existing
      one, and writes of missing keys, the events of "KEA" plus m.
  setbit(ports)  SETBIT that changes the bit, makes or grows the key, or
      does neither (Redis 7.0 sends setbit only for the first three).
"""
import threading
import time

from hydra_pair import check, keys_on_distinct_shards, redis, shard_of


def _drain(ps, quiet=0.4, limit=10.0):
    got = []
    end = time.time() + limit
    last = time.time()
    while time.time() < end and time.time() - last < quiet:
        m = ps.get_message(timeout=0.02)
        while m is not None:
            if m["type"] == "pmessage":
                got.append((m["channel"].decode(), m["data"].decode()))
                last = time.time()
            m = ps.get_message(timeout=0)
    return got


def _blocked_clients(r):
    return int(r.info("clients")["blocked_clients"])


def _run_case(port, flags, setup, blockers, trigger):
    """The events one subscriber gets for `trigger` (after `setup`, with
    each of `blockers` blocked on its own connection), and the blocked
    clients' replies and the trigger's replies."""
    r = redis.Redis(port=port, socket_timeout=20)
    r.flushall()
    r.config_set("notify-keyspace-events", "")
    for cmd in setup:
        r.execute_command(*cmd)
    r.config_set("notify-keyspace-events", flags)
    ps = redis.Redis(port=port, socket_timeout=20).pubsub()
    ps.psubscribe("*")
    ps.get_message(timeout=5)
    replies = [None] * len(blockers)
    threads = []
    for i, cmd in enumerate(blockers):
        def run(i=i, cmd=cmd):
            try:
                replies[i] = redis.Redis(port=port, socket_timeout=20).execute_command(*cmd)
            except redis.exceptions.RedisError as e:
                replies[i] = ("error", str(e))
        t = threading.Thread(target=run)
        t.start()
        threads.append(t)
        end = time.time() + 10
        while _blocked_clients(r) < i + 1 and time.time() < end:
            time.sleep(0.01)
    out = []
    for cmd in trigger:
        try:
            out.append(r.execute_command(*cmd))
        except redis.exceptions.ResponseError as e:
            out.append(("error", str(e)))
        except TypeError:  # redis-py's parser for OBJECT wants its own call: the reply came
            out.append(("unparsed",))
    for t in threads:
        t.join(20)
    got = _drain(ps)
    ps.close()
    r.config_set("notify-keyspace-events", "")
    return got, replies, out


def _compare(ports, name, flags, setup, blockers, trigger):
    (h_ev, h_rep, h_out), (r_ev, r_rep, r_out) = (_run_case(p, flags, setup, blockers, trigger) for p in ports)
    check(len(r_ev) > 0 and h_ev == r_ev and h_rep == r_rep and h_out == r_out,
          f"{name}: the events of redis-server, in its order, and its replies",
          f"\n  hydra        {h_ev}\n  redis-server {r_ev}\n  replies: hydra {h_rep} {h_out}, redis-server {r_rep} {r_out}")


def blocking(ports, shards):
    s, d, e = keys_on_distinct_shards("bk", shards)[:2] + [keys_on_distinct_shards("bq", shards)[0]]
    for name, setup, blockers, trigger, *flags in [
        ("BLPOP, then RPUSH", [], [["blpop", s, "0"]], [["rpush", s, "a"]]),
        ("BRPOP, then RPUSH of 2 (one left)", [], [["brpop", s, "0"]], [["rpush", s, "a", "b"]]),
        ("BLPOP on 2 keys, then LPUSH to the second", [], [["blpop", e, s, "0"]], [["lpush", s, "a"]]),
        ("BLPOP and BRPOP on one key, then RPUSH of 2", [], [["blpop", s, "0"], ["brpop", s, "0"]],
         [["rpush", s, "a", "b"]]),
        ("BLMPOP COUNT 2, then RPUSH of 3", [], [["blmpop", "0", "1", s, "LEFT", "COUNT", "2"]],
         [["rpush", s, "a", "b", "c"]]),
        ("BLMOVE, then RPUSH", [], [["blmove", s, d, "LEFT", "RIGHT", "0"]], [["rpush", s, "a"]]),
        ("BRPOPLPUSH, then RPUSH", [], [["brpoplpush", s, d, "0"]], [["rpush", s, "a"]]),
        ("BLMOVE onto a list another client waits on, then RPUSH", [],
         [["blmove", s, d, "LEFT", "RIGHT", "0"], ["blpop", d, "0"]], [["rpush", s, "a"]]),
        ("BRPOPLPUSH with source and destination the same key, then RPUSH", [], [["brpoplpush", s, s, "0"]],
         [["rpush", s, "a"]]),
        ("with n: BRPOPLPUSH of the same key, then RPUSH", [], [["brpoplpush", s, s, "0"]], [["rpush", s, "a"]], "AKEn"),
        ("with n: BLMOVE, then RPUSH", [], [["blmove", s, d, "LEFT", "RIGHT", "0"]], [["rpush", s, "a"]], "AKEn"),
        ("BLMOVE with an element there (no blocking)", [["rpush", s, "x"]], [],
         [["blmove", s, d, "RIGHT", "LEFT", "0"]]),
        ("BZPOPMIN, then ZADD", [], [["bzpopmin", s, "0"]], [["zadd", s, "1", "a"]]),
        ("BZPOPMAX, then ZADD of 2", [], [["bzpopmax", s, "0"]], [["zadd", s, "1", "a", "2", "b"]]),
        ("BZMPOP COUNT 5, then ZADD of 2", [], [["bzmpop", "0", "1", s, "MIN", "COUNT", "5"]],
         [["zadd", s, "1", "a", "2", "b"]]),
    ]:
        _compare(ports, f"{shards} shards: {name}", (flags or ["KEA"])[0], setup, blockers, trigger)


def moves(ports, shards):
    s, d = keys_on_distinct_shards("mv", shards)[:2]
    for flags in ("KEA", "AKEn"):  # n: no "new" for a key the same-key move empties and refills
        _compare(ports, f"{shards} shards, {flags}: LMOVE and RPOPLPUSH (other key, same key, emptying the source)",
                 flags, [["rpush", s, "a"]], [],
                 [["lmove", s, d, "LEFT", "RIGHT"], ["rpush", s, "a", "b"], ["lmove", s, d, "RIGHT", "LEFT"],
                  ["rpoplpush", s, d], ["rpoplpush", d, d], ["lmove", d, d, "LEFT", "RIGHT"],
                  ["rpush", s, "1"], ["lmove", s, s, "LEFT", "LEFT"], ["lmove", "nolist", d, "LEFT", "LEFT"]])


# Reads of a missing key ("nx", "nx2"), then of existing ones: Redis's
# lookupKeyRead sends keymiss for a miss, nothing for a hit.
KEYMISS_READS = [
    ["get", "nx"], ["mget", "nx", "str", "nx2"], ["strlen", "nx"], ["getrange", "nx", "0", "1"],
    ["substr", "nx", "0", "1"], ["getbit", "nx", "1"], ["bitcount", "nx"],
    ["exists", "nx"], ["type", "nx"], ["ttl", "nx"], ["pttl", "nx"], ["expiretime", "nx"], ["dump", "nx"],
    ["hget", "nx", "f"], ["hmget", "nx", "f"], ["hgetall", "nx"], ["hkeys", "nx"], ["hvals", "nx"],
    ["hexists", "nx", "f"], ["hlen", "nx"], ["hstrlen", "nx", "f"], ["hrandfield", "nx"], ["hscan", "nx", "0"],
    ["lrange", "nx", "0", "1"], ["llen", "nx"], ["lindex", "nx", "0"], ["lpos", "nx", "a"],
    ["smembers", "nx"], ["scard", "nx"], ["sismember", "nx", "a"], ["smismember", "nx", "a"],
    ["srandmember", "nx"], ["sscan", "nx", "0"], ["sinter", "nx", "nx2"], ["sunion", "nx", "nx2"],
    ["sdiff", "nx", "nx2"], ["sintercard", "2", "nx", "nx2"], ["zunion", "2", "nx", "nx2"], ["zinter", "2", "nx", "nx2"],
    ["zrange", "nx", "0", "1"], ["zcard", "nx"], ["zscore", "nx", "a"], ["zrank", "nx", "a"],
    ["zcount", "nx", "0", "1"], ["zrangebyscore", "nx", "0", "1"], ["zrevrange", "nx", "0", "1"],
    ["zmscore", "nx", "a"], ["zscan", "nx", "0"], ["zrandmember", "nx"],
    ["lcs", "nx", "nx2"], ["sort", "nx"], ["object", "encoding", "nx"], ["getdel", "nx"], ["getex", "nx"],
    ["touch", "nx"], ["touch", "str"], ["sort", "sl", "by", "w_*", "get", "g_*"],
    # The writes last, each on a key of its own that no command before made
    # (GETSET makes its key): COPY's source is a read (keymiss), the others'
    # are lookupKeyWrite (none).
    ["getset", "nxg", "v"], ["copy", "nxc", "nx3"], ["zrangestore", "nx4", "nxz", "0", "1"], ["lpop", "nxl"],
    ["append", "nx5", "v"], ["spop", "nxs"], ["rename", "nxr", "nx6"], ["smove", "nxm", "nx6", "a"],
    ["get", "str"], ["hget", "h", "f"], ["lrange", "l", "0", "-1"], ["smembers", "s"], ["zrange", "z", "0", "-1"],
    ["mget", "str", "nx"], ["exists", "str", "nx"],
]


def keymiss(ports, shards):
    # The second missing key on the shard of the first: Hydra reads the
    # keys of different shards in parallel, so their keymiss events may
    # come in either order (the README says so).
    twin = next(f"nx{i}" for i in range(2, 10000) if shard_of(f"nx{i}", shards) == shard_of("nx", shards))
    reads = [[twin if a == "nx2" else a for a in c] for c in KEYMISS_READS]
    # SORT's one element names BY and GET keys on one shard (their keymiss
    # events in Redis's order: BY's, then GET's).
    elem = next(f"e{i}" for i in range(10000) if shard_of(f"w_e{i}", shards) == shard_of(f"g_e{i}", shards))
    # Each read is followed by "incr mark" (its incrby event), so a missing
    # or extra event shows next to the read that made it.
    trigger = []
    for c in reads:
        trigger += [c, ["incr", "mark"]]
    setup = [["set", "str", "v"], ["hset", "h", "f", "1"], ["rpush", "l", "a"], ["sadd", "s", "a"],
             ["zadd", "z", "1", "a"], ["rpush", "sl", elem]]
    ev = []
    for p in ports:
        got, _, out = _run_case(p, "KEAm", setup, [], trigger)
        unknown = [" ".join(c) for c, o in zip(trigger, out) if isinstance(o, tuple) and "unknown" in o[-1]]
        check(not unknown, f"keymiss: port {p} has every read command the case uses", unknown)
        per, cur = [], []
        for ch, msg in got:
            if ch.endswith(":mark") or ch.endswith(":incrby"):
                if ch.endswith(":incrby"):
                    per.append(cur)
                    cur = []
                continue
            cur.append((ch, msg))
        ev.append(per)
    check(any(ev[1]), "keymiss: redis-server sent keymiss events (the test sees something)")
    # A check per read that redis-server answers with keymiss; the commands
    # it sends none for (hits, OBJECT, and the writes, with their own
    # events) are one guard against sending too many.
    quiet = []
    for i, c in enumerate(reads):
        h = ev[0][i] if i < len(ev[0]) else None
        rr = ev[1][i] if i < len(ev[1]) else None
        if rr and any(ch.endswith(":keymiss") for ch, _ in rr):
            check(h == rr, f"keymiss: {' '.join(c)}: redis-server's events", f"hydra {h}, redis-server {rr}")
        elif h != rr:
            quiet.append(f"{' '.join(c)}: hydra {h}, redis-server {rr}")
    check(not quiet, "keymiss: none where redis-server sends none (hits, OBJECT, LPOP, APPEND, RENAME, SMOVE...)", quiet)
    # Class m alone (no A): keymiss still sent, and nothing else.
    _compare(ports, "keymiss with flags Em only: GET, HGET of missing keys, SET", "Em", [],
             [], [["get", "a"], ["hget", "b", "f"], ["set", "a", "1"], ["get", "a"]])


def setbit(ports):
    _compare(ports, "SETBIT: a change, no change, a new key, a grown key", "KEA", [], [],
             [["setbit", "b", "3", "1"], ["setbit", "b", "3", "1"], ["setbit", "b", "3", "0"],
              ["setbit", "b", "3", "0"], ["setbit", "c", "1", "0"], ["setbit", "b", "100", "0"],
              ["setbit", "b", "7", "0"]])
    # Nor is it a write for WATCH: EXEC goes on after a SETBIT that changed
    # nothing, and fails after one that did.
    got = []
    for p in ports:
        r, o = redis.Redis(port=p, socket_timeout=20), redis.Redis(port=p, socket_timeout=20)
        r.flushall()
        r.setbit("w", 3, 1)
        outcomes = []
        for bit in (1, 0):
            pipe = r.pipeline()
            pipe.watch("w")
            o.setbit("w", 3, bit)
            pipe.multi()
            pipe.set("x", "1")
            try:
                outcomes.append(pipe.execute())
            except redis.WatchError:
                outcomes.append("aborted")
        got.append(outcomes)
    check(got[0] == got[1] == [[True], "aborted"], "SETBIT under WATCH: the same bit again lets EXEC run, a change aborts it",
          f"hydra {got[0]}, redis-server {got[1]}")
