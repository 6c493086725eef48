"""`redis://...` — the networked reference store over Redis (redis-py).

Design (each line answers a clause of CONTRACT section 1):
- The location names a key prefix, `soak:<hash of the location's real path>:`; a registry hash
  (`soak:namespaces`, prefix -> location) lets `cleanup(root)` remove the keys of every location at or
  under `root`.
- Every lease operation and every fenced mutation is one Lua script that reads the tenure, checks
  owner, epoch, release and expiry, and mutates: Redis runs a script alone, so no takeover lands
  between the check and the write (`atomic-fence`). The journal's order guard sits in the same script.
- Expiry is judged by the server's clock, `TIME` inside the script (`store-clock`): the store declares
  no injectable clock.
- A run's tenure hash (owner, epoch, expiry, released) is never deleted: it is the epoch high-water
  mark that survives release and delete (`epoch-monotonic`).
- One connection per store object, with redis-py's own retries off: a script whose reply was lost is
  never sent again behind the caller's back. A connection lost with a script in flight is
  indeterminate (re-raised as it is); the next call reconnects. A server that refused the call
  before running it (`BUSY`, `LOADING`) wrote nothing: `StoreBusyError`.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any
from urllib.parse import urlsplit

import redis as redis_py
from redis.backoff import NoBackoff
from redis.retry import Retry

from soak.spi import (
    RUN_STATUSES,
    JournalEntry,
    JournalOrderError,
    Lease,
    LeaseHeldError,
    RunMeta,
    StoreBusyError,
)
from soak.stores._blobs import SharedBlobs

__all__ = ["RedisStore", "cleanup_redis", "namespace", "open_redis"]

REGISTRY = "soak:namespaces"
STORE_OPTIONS = ("socket_timeout_s",)

# KEYS[1] is always the run's tenure hash. ARGV[1..4]: leased ('1' or '0'), owner, epoch, caller's now (ms; only
# a mutant reads it). A script answers {'ok', ...}, {'fence', holder_owner, holder_epoch} or {'order', tail}.
_PRELUDE = """
local function now_ms() {now} end
local function holder(k, now)
  local l = redis.call('HMGET', k, 'owner', 'epoch', 'exp', 'rel')
  if l[2] and l[4] ~= '1' and tonumber(l[3]) > now then return l[1], l[2] end
  return '', '0'
end
local function fenced(k, now)
  if ARGV[1] ~= '1' then return true end
  local l = redis.call('HMGET', k, 'owner', 'epoch', 'exp', 'rel')
  return l[1] == ARGV[2] and l[2] == ARGV[3] and l[4] ~= '1' and tonumber(l[3]) > now
end
local function refuse(k, now)
  local o, e = holder(k, now)
  return {'fence', o, e}
end
local now = now_ms()
"""
_SERVER_NOW = "local t = redis.call('TIME'); return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"

_SCRIPTS = {
    # ARGV[5]: ttl ms
    "acquire": """
local o, e = holder(KEYS[1], now)
if o ~= '' then return {'fence', o, e} end
local epoch = (tonumber(redis.call('HGET', KEYS[1], 'epoch')) or 0) + 1
redis.call('HSET', KEYS[1], 'owner', ARGV[2], 'epoch', epoch, 'exp', now + tonumber(ARGV[5]), 'rel', '0')
return {'ok', epoch}
""",
    "renew": """
if not fenced(KEYS[1], now) then return refuse(KEYS[1], now) end
redis.call('HSET', KEYS[1], 'exp', now + tonumber(ARGV[5]))
return {'ok'}
""",
    # an expired tenure nobody superseded may still be released: it ends only itself
    "release": """
local l = redis.call('HMGET', KEYS[1], 'owner', 'epoch', 'rel')
if l[1] ~= ARGV[2] or l[2] ~= ARGV[3] or l[3] == '1' then return refuse(KEYS[1], now) end
redis.call('HSET', KEYS[1], 'rel', '1')
return {'ok'}
""",
    # KEYS[2] tail, KEYS[3] journal; ARGV[5] seq, ARGV[6] packed entry
    "append": """
if not fenced(KEYS[1], now) then return refuse(KEYS[1], now) end
local tail = tonumber(redis.call('GET', KEYS[2])) or 0
local seq = tonumber(ARGV[5])
if seq <= tail then return {'order', tail} end
redis.call('SET', KEYS[2], ARGV[5])
redis.call('RPUSH', KEYS[3], ARGV[6])
return {'ok'}
""",
    # KEYS[2] a hash; ARGV[5] field, ARGV[6] value
    "hset": """
if not fenced(KEYS[1], now) then return refuse(KEYS[1], now) end
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
return {'ok'}
""",
    "hdel": """
if not fenced(KEYS[1], now) then return refuse(KEYS[1], now) end
redis.call('HDEL', KEYS[2], ARGV[5])
return {'ok'}
""",
    # KEYS[2] tail, KEYS[3] journal, KEYS[4] meta hash; ARGV[5] run id
    "delete": """
if not fenced(KEYS[1], now) then return refuse(KEYS[1], now) end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('HDEL', KEYS[4], ARGV[5])
return {'ok'}
""",
}


def namespace(location: str) -> str:
    """The key prefix a location's data lives under."""
    return "soak:" + hashlib.sha256(os.path.realpath(location).encode()).hexdigest()[:24] + ":"


def _client(url: str, socket_timeout_s: float) -> redis_py.Redis:
    return redis_py.Redis.from_url(url, single_connection_client=True, retry=Retry(NoBackoff(), 0),
                                   socket_timeout=socket_timeout_s, socket_connect_timeout=socket_timeout_s)


def _pack_meta(meta: RunMeta) -> bytes:
    return f"{meta.status}\n{meta.segments}\n".encode() + bytes(meta.payload)


def _unpack_meta(run_id: str, raw: bytes) -> RunMeta:
    status, segments, payload = raw.split(b"\n", 2)
    return RunMeta(run_id, status.decode(), int(segments), bytes(payload))


class RedisStore:
    """The fenced run store under one Redis key prefix, safe across processes and hosts."""

    fenced_writes = True
    #: the body of the scripts' `now_ms()` (a mutant reads the caller's clock instead)
    NOW = _SERVER_NOW

    def __init__(self, url: str, location: str, lease_ttl_ms: int = 250, *, socket_timeout_s: float = 10.0) -> None:
        self.url = url
        self.prefix = namespace(location)
        self.location = os.path.realpath(location)
        self.lease_ttl_ms = int(lease_ttl_ms)
        self._r: redis_py.Redis | None = _client(url, float(socket_timeout_s))
        self._scripts = {name: self._r.register_script(_PRELUDE.replace("{now}", self.NOW) + body)
                         for name, body in _SCRIPTS.items()}
        self._call(lambda r: r.hsetnx(REGISTRY, self.prefix, self.location))  # the bootstrap: idempotent
        self.transcripts = SharedBlobs(self)

    # -- plumbing ---------------------------------------------------------------------------

    def _key(self, kind: str, run_id: str = "") -> str:
        return f"{self.prefix}{kind}:{run_id}" if run_id else f"{self.prefix}{kind}"

    def _call(self, fn: Any) -> Any:
        """One command or script; errors mapped at this boundary."""
        if self._r is None:
            raise ValueError("store is closed")
        try:
            return fn(self._r)
        except redis_py.exceptions.BusyLoadingError as exc:
            raise StoreBusyError(f"redis is loading its dataset: {exc}") from exc
        except redis_py.exceptions.ResponseError as exc:
            if str(exc).startswith(("BUSY", "TRYAGAIN")):  # refused before it ran: nothing written
                raise StoreBusyError(f"redis busy: {exc}") from exc
            raise

    def _caller_now(self) -> int:
        return 0

    def _script(self, name: str, run_id: str, lease: Lease | None, keys: list[str], args: list[Any]) -> list:
        head = ["1", lease.owner, str(lease.epoch)] if lease is not None else ["0", "", ""]
        keys = [self._key("lease", run_id), *keys]
        return self._call(lambda r: self._scripts[name](keys=keys, args=[*head, self._caller_now(), *args], client=r))

    def _refusal(self, run_id: str, answer: list, lease: Lease | None) -> LeaseHeldError:
        holder = Lease(run_id, answer[1].decode(), int(answer[2])) if int(answer[2]) else None
        return LeaseHeldError(run_id, holder, f"lease {lease} is not the current live tenure")

    def _mutate(self, name: str, run_id: str, lease: Lease | None, keys: list[str], args: list[Any]) -> list:
        if lease is not None and lease.run_id != run_id:
            raise LeaseHeldError(run_id, None, f"lease for run {lease.run_id!r} used on run {run_id!r}")
        answer = self._script(name, run_id, lease, keys, args)
        if answer[0] == b"fence":
            raise self._refusal(run_id, answer, lease)
        return answer

    # -- leases -----------------------------------------------------------------------------

    def acquire(self, run_id: str, owner: str) -> Lease:
        answer = self._script("acquire", run_id, Lease(run_id, owner, 0), [], [self.lease_ttl_ms])
        if answer[0] == b"fence":
            raise self._refusal(run_id, answer, None)
        return Lease(run_id, owner, int(answer[1]))

    def renew(self, lease: Lease) -> Lease:
        answer = self._script("renew", lease.run_id, lease, [], [self.lease_ttl_ms])
        if answer[0] == b"fence":
            raise self._refusal(lease.run_id, answer, lease)
        return lease

    def release(self, lease: Lease) -> None:
        answer = self._script("release", lease.run_id, lease, [], [])
        if answer[0] == b"fence":
            raise self._refusal(lease.run_id, answer, lease)

    # -- journal and meta -------------------------------------------------------------------

    def append(self, run_id: str, entry: JournalEntry, lease: Lease | None = None) -> None:
        packed = entry.seq.to_bytes(8, "big", signed=True) + bytes(entry.payload)
        answer = self._mutate("append", run_id, lease, [self._key("tail", run_id), self._key("journal", run_id)],
                              [entry.seq, packed])
        if answer[0] == b"order":
            raise JournalOrderError(f"append seq {entry.seq} to run {run_id!r} is not above the tail {int(answer[1])}")

    def load(self, run_id: str) -> list[JournalEntry]:
        raw = self._call(lambda r: r.lrange(self._key("journal", run_id), 0, -1))
        return [JournalEntry(int.from_bytes(item[:8], "big", signed=True), bytes(item[8:])) for item in raw]

    def put_meta(self, meta: RunMeta, lease: Lease | None = None) -> None:
        if meta.status not in RUN_STATUSES:
            raise ValueError(f"RunMeta.status {meta.status!r} is not one of {RUN_STATUSES}")
        self._mutate("hset", meta.run_id, lease, [self._key("meta")], [meta.run_id, _pack_meta(meta)])

    def get_meta(self, run_id: str) -> RunMeta | None:
        raw = self._call(lambda r: r.hget(self._key("meta"), run_id))
        return None if raw is None else _unpack_meta(run_id, raw)

    def list_runs(self) -> list[RunMeta]:
        rows = self._call(lambda r: r.hgetall(self._key("meta")))
        return sorted((_unpack_meta(k.decode(), v) for k, v in rows.items()), key=lambda m: m.run_id)

    def delete(self, run_id: str, lease: Lease | None = None) -> None:
        self._mutate("delete", run_id, lease, [self._key("tail", run_id), self._key("journal", run_id),
                                               self._key("meta")], [run_id])

    # -- blobs (store.transcripts): one hash per run, ref -> bytes ----------------------------

    def _blob_put(self, run_id: str, ref: str, blob: bytes, lease: Lease | None) -> None:
        self._mutate("hset", run_id, lease, [self._key("blobs", run_id)], [ref, blob])

    def _blob_get(self, run_id: str, ref: str) -> bytes | None:
        return self._call(lambda r: r.hget(self._key("blobs", run_id), ref))

    def _blob_list(self, run_id: str) -> list[str]:
        return sorted(k.decode() for k in self._call(lambda r: r.hkeys(self._key("blobs", run_id))))

    def _blob_delete(self, run_id: str, ref: str, lease: Lease | None) -> None:
        self._mutate("hdel", run_id, lease, [self._key("blobs", run_id)], [ref])

    def close(self) -> None:
        if self._r is not None:
            try:
                self._r.close()
            finally:
                self._r = None


def open_redis(location: str, *, lease_ttl_ms: int, url: str, socket_timeout_s: str | float = 10,
               cls: type[RedisStore] = RedisStore) -> RedisStore:
    """Factory for `redis://...`: the location's own key prefix in the database the spec names."""
    return cls(url, location, lease_ttl_ms, socket_timeout_s=float(socket_timeout_s))


def cleanup_redis(root: str, options: dict[str, Any]) -> int:
    """Remove the keys of `root` and of every location under it (the registry names them); returns how many
    namespaces."""
    root = os.path.realpath(root)
    under = root.rstrip("/") + "/"
    r = _client(options["url"], float(options.get("socket_timeout_s", 10)))
    try:
        gone = [p for p, loc in r.hgetall(REGISTRY).items() if loc.decode() == root or loc.decode().startswith(under)]
        for prefix in gone:
            batch = []
            for key in r.scan_iter(match=prefix.replace(b"*", b"\\*") + b"*", count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    r.unlink(*batch)
                    batch.clear()
            if batch:
                r.unlink(*batch)
            r.hdel(REGISTRY, prefix)
        return len(gone)
    finally:
        r.close()


def spec_target(url: str, options: dict[str, str], *, factory: Any = None, extra: dict[str, Any] | None = None,
                description: str = "networked Redis reference store") -> Any:
    """The `StoreTarget` of a `redis://` spec (redis://HOST:PORT/DB)."""
    from soak.errors import StoreSpecError
    from soak.stores import StoreTarget, redact

    unknown = sorted(set(options) - set(STORE_OPTIONS))
    if unknown:
        raise StoreSpecError(f"redis: has no option {unknown[0]!r}; options are {', '.join(STORE_OPTIONS)}")
    parts = urlsplit(url)
    db = parts.path.strip("/")
    if parts.scheme != "redis" or not parts.hostname or (db and not db.isdigit()):
        raise StoreSpecError(f"redis spec {redact(url)!r} is malformed; write redis://HOST:PORT/DB, e.g. "
                             "redis://127.0.0.1:6379/0")
    spec = url + ("?" + "&".join(f"{k}={v}" for k, v in options.items()) if options else "")
    return StoreTarget(spec, factory or open_redis, {"url": url, **options, **(extra or {})},
                       description=description, remove=cleanup_redis)
