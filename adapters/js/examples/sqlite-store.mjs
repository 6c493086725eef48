// A fenced run store over one SQLite file (better-sqlite3), safe across processes, written to the
// seed RFC's SPI the way its SqliteStore is: the journal store with leases, meta and fenced
// writes, and `transcripts()`, the blob store in the same database (one fencing domain).
//
// - WAL journal; every lease operation and every fenced mutation is ONE `BEGIN IMMEDIATE`
//   transaction that reads the clock, checks the fence and mutates, and the mutation's own
//   statement pins owner and epoch again (the seed's F3 fix, defence in depth).
// - The `leases` row of a run is never deleted: it is the epoch high-water mark that survives
//   release and delete. Expiry is judged by this store's clock (the host's wall clock, read
//   inside the write lock), never a caller's.
// - SQLite's busy and locked errors become StoreBusyError, after the transaction rolled back:
//   nothing was written.
// - Boot sets the busy timeout before switching to WAL and retries the idempotent bootstrap as a
//   unit under a wall-clock bound, so many processes may open one fresh file at once.
//
// Options (from soak's spec, `exec:node serve.mjs sqlite-store.mjs?busy_timeout_ms=50`, strings):
// `file` (the database's name inside the location, default store.db), `busy_timeout_ms` (5000),
// `boot_timeout_ms` (15000), `synchronous` (NORMAL; FULL for power-loss durability).

import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';

export class LeaseHeldError extends Error {
  constructor(runId, holder, message) {
    super(message ?? `run ${runId} is held${holder ? ` by ${holder.owner} (epoch ${holder.epoch})` : ''}`);
    this.runId = runId;
    this.holder = holder ?? null;
  }
}

export class JournalOrderError extends Error {}

export class StoreBusyError extends Error {}

const STATUSES = new Set(['running', 'suspended', 'completed', 'failed', 'cancelled']);
const SYNCHRONOUS = new Set(['OFF', 'NORMAL', 'FULL', 'EXTRA']);
const OPTIONS = new Set(['file', 'busy_timeout_ms', 'boot_timeout_ms', 'synchronous']);

const SCHEMA = [
  `CREATE TABLE IF NOT EXISTS leases (run_id TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,
     expires_at INTEGER NOT NULL, released INTEGER NOT NULL DEFAULT 0)`,
  `CREATE TABLE IF NOT EXISTS journal (run_id TEXT NOT NULL, seq INTEGER NOT NULL, payload BLOB NOT NULL,
     PRIMARY KEY (run_id, seq)) WITHOUT ROWID`,
  `CREATE TABLE IF NOT EXISTS meta (run_id TEXT PRIMARY KEY, status TEXT NOT NULL, segments INTEGER NOT NULL,
     payload BLOB NOT NULL)`,
  'CREATE TABLE IF NOT EXISTS blobs (ref TEXT PRIMARY KEY, run_id TEXT NOT NULL, data BLOB NOT NULL)',
  'CREATE INDEX IF NOT EXISTS blobs_by_run ON blobs (run_id)',
];

// The fence pinned into a mutation's own statement: the row must still name this tenure.
const PIN = 'EXISTS (SELECT 1 FROM leases WHERE run_id = ? AND owner = ? AND epoch = ? AND released = 0)';

export function isBusy(err) {
  return typeof err?.code === 'string' && /^SQLITE_(BUSY|LOCKED)/.test(err.code);
}

function runOfRef(ref) {
  const i = ref.indexOf('/');
  if (i <= 0 || i === ref.length - 1) throw new TypeError(`blob ref ${JSON.stringify(ref)} is not "<runId>/<name>"`);
  return ref.slice(0, i);
}

const bytes = (b) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);
const view = (buf) => new Uint8Array(buf);

export class SqliteTranscripts {
  fencedWrites = true;

  constructor(store) {
    this.store = store;
  }

  async put(ref, blob, lease) {
    const runId = runOfRef(ref);
    this.store.fenced(runId, lease, (pin) => {
      const r = this.store.run(
        `INSERT INTO blobs (ref, run_id, data) SELECT ?, ?, ? WHERE ${pin.sql} ON CONFLICT (ref) DO UPDATE SET data = excluded.data`,
        ref, runId, bytes(blob), ...pin.args);
      this.store.pinned(r, runId, lease);
    });
  }

  async get(ref) {
    const row = this.store.read('get', 'SELECT data FROM blobs WHERE ref = ?', ref);
    return row === undefined ? null : view(row.data);
  }

  async list(runId) {
    return this.store.read('all', 'SELECT ref FROM blobs WHERE run_id = ? ORDER BY ref', runId).map((r) => r.ref);
  }

  async delete(ref, lease) {
    const runId = runOfRef(ref);
    this.store.fenced(runId, lease, (pin) => {
      this.store.run(`DELETE FROM blobs WHERE ref = ? AND ${pin.sql}`, ref, ...pin.args);
    });
  }
}

export class SqliteStore {
  static Transcripts = SqliteTranscripts;
  fencedWrites = true;

  constructor(db, { leaseTtlMs, clock = Date.now }) {
    this.db = db;
    this.leaseTtlMs = leaseTtlMs;
    this.clock = clock;
    this.statements = new Map();
    this.blobStore = new this.constructor.Transcripts(this);
  }

  /** Open (and bootstrap, idempotently) the store over the file at `path`. */
  static async open(path, { leaseTtlMs, busyTimeoutMs = 5000, bootTimeoutMs = 15000, synchronous = 'NORMAL' }) {
    const deadline = Date.now() + bootTimeoutMs;
    let delay = 2;
    for (;;) {
      let db = null;
      try {
        db = new Database(path, { timeout: busyTimeoutMs }); // sets the busy timeout before anything else
        const mode = db.pragma('journal_mode = WAL', { simple: true });
        if (String(mode).toLowerCase() !== 'wal') {
          throw Object.assign(new Error(`journal_mode stayed ${mode}`), { code: 'SQLITE_BUSY' });
        }
        db.pragma(`synchronous = ${synchronous}`);
        db.transaction(() => SCHEMA.forEach((s) => db.exec(s))).immediate();
        return new this(db, { leaseTtlMs });
      } catch (err) {
        db?.close();
        if (!isBusy(err)) throw err;
        if (Date.now() >= deadline) throw new StoreBusyError(`sqlite bootstrap of ${path} stayed busy for ${bootTimeoutMs} ms: ${err.message}`);
        await sleep(delay * (0.5 + Math.random()));
        delay = Math.min(delay * 2, 100);
      }
    }
  }

  transcripts() {
    return this.blobStore;
  }

  // -- plumbing ------------------------------------------------------------------------------

  stmt(sql) {
    let s = this.statements.get(sql);
    if (s === undefined) {
      s = this.db.prepare(sql);
      this.statements.set(sql, s);
    }
    return s;
  }

  run(sql, ...args) {
    return this.stmt(sql).run(...args);
  }

  /** One read outside any transaction (`how` is get or all); busy becomes StoreBusyError. */
  read(how, sql, ...args) {
    try {
      return this.stmt(sql)[how](...args);
    } catch (err) {
      if (isBusy(err)) throw new StoreBusyError(`sqlite busy: ${err.message}`);
      throw err;
    }
  }

  /** Run `fn` in one BEGIN IMMEDIATE transaction; better-sqlite3 rolls back on a throw. */
  tx(fn) {
    try {
      return this.db.transaction(fn).immediate();
    } catch (err) {
      if (isBusy(err)) throw new StoreBusyError(`sqlite busy: ${err.message}`);
      throw err;
    }
  }

  tenure(runId) {
    return this.stmt('SELECT owner, epoch, expires_at, released FROM leases WHERE run_id = ?').get(runId);
  }

  holder(runId, row, now) {
    if (row === undefined || row.released || now >= row.expires_at) return null;
    return { runId, owner: row.owner, epoch: row.epoch };
  }

  /** Refuse unless `lease` is the run's current unreleased tenure (and, unless allowed, unexpired). */
  check(runId, lease, { allowExpired = false } = {}) {
    const now = this.clock();
    const row = this.tenure(runId);
    if (lease.runId !== runId) {
      throw new LeaseHeldError(runId, this.holder(runId, row, now), `lease for run ${lease.runId} used on run ${runId}`);
    }
    if (row === undefined || row.released || row.owner !== lease.owner || row.epoch !== lease.epoch) {
      throw new LeaseHeldError(runId, this.holder(runId, row, now), `lease epoch ${lease.epoch} of ${lease.owner} is not the current tenure`);
    }
    if (!allowExpired && now >= row.expires_at) throw new LeaseHeldError(runId, null, `lease epoch ${lease.epoch} has expired`);
    return now;
  }

  /**
   * The fence and the mutation as one unit: in one immediate transaction, check `lease` (when
   * given) and run `mutate(pin)`, where `pin` is the fence to repeat in the mutation's own
   * statement (always true without a lease: unleased writes are not fenced).
   */
  fenced(runId, lease, mutate, { allowExpired = false } = {}) {
    return this.tx(() => {
      if (lease === undefined || lease === null) return mutate({ sql: '1', args: [], now: this.clock() });
      const now = this.check(runId, lease, { allowExpired });
      return mutate({ sql: PIN, args: [lease.runId, lease.owner, lease.epoch], now });
    });
  }

  pinned(result, runId, lease) {
    if (lease && result.changes !== 1) throw new LeaseHeldError(runId, null, `lease epoch ${lease.epoch} lost its tenure inside the transaction`);
  }

  // -- leases --------------------------------------------------------------------------------

  async acquire(runId, owner) {
    return this.tx(() => {
      const now = this.clock();
      const row = this.tenure(runId);
      const live = this.holder(runId, row, now);
      if (live) throw new LeaseHeldError(runId, live);
      const epoch = (row?.epoch ?? 0) + 1;
      this.run(
        `INSERT INTO leases (run_id, owner, epoch, expires_at, released) VALUES (?, ?, ?, ?, 0)
         ON CONFLICT (run_id) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch,
         expires_at = excluded.expires_at, released = 0`,
        runId, owner, epoch, now + this.leaseTtlMs);
      return { runId, owner, epoch };
    });
  }

  async renew(lease) {
    this.fenced(lease.runId, lease, (pin) => {
      const r = this.run(`UPDATE leases SET expires_at = ? WHERE run_id = ? AND ${pin.sql}`, pin.now + this.leaseTtlMs, lease.runId, ...pin.args);
      this.pinned(r, lease.runId, lease);
    });
    return lease;
  }

  async release(lease) {
    // An expired tenure nobody superseded may still be released: it ends only itself.
    this.fenced(lease.runId, lease, (pin) => {
      const r = this.run(`UPDATE leases SET released = 1 WHERE run_id = ? AND ${pin.sql}`, lease.runId, ...pin.args);
      this.pinned(r, lease.runId, lease);
    }, { allowExpired: true });
  }

  // -- journal and meta ----------------------------------------------------------------------

  async append(runId, e, lease) {
    this.fenced(runId, lease, (pin) => {
      const tail = this.stmt('SELECT MAX(seq) AS tail FROM journal WHERE run_id = ?').get(runId).tail ?? 0;
      if (e.seq <= tail) throw new JournalOrderError(`append seq ${e.seq} to run ${runId} is not above the tail ${tail}`);
      const r = this.run(`INSERT INTO journal (run_id, seq, payload) SELECT ?, ?, ? WHERE ${pin.sql}`, runId, e.seq, bytes(e.payload), ...pin.args);
      this.pinned(r, runId, lease);
    });
  }

  async load(runId) {
    return this.read('all', 'SELECT seq, payload FROM journal WHERE run_id = ? ORDER BY seq', runId)
      .map((r) => ({ seq: r.seq, payload: view(r.payload) }));
  }

  async putMeta(m, lease) {
    if (!STATUSES.has(m.status)) throw new TypeError(`RunMeta.status ${JSON.stringify(m.status)} is not one of ${[...STATUSES]}`);
    this.fenced(m.runId, lease, (pin) => {
      const r = this.run(
        `INSERT INTO meta (run_id, status, segments, payload) SELECT ?, ?, ?, ? WHERE ${pin.sql}
         ON CONFLICT (run_id) DO UPDATE SET status = excluded.status, segments = excluded.segments, payload = excluded.payload`,
        m.runId, m.status, m.segments, bytes(m.payload), ...pin.args);
      this.pinned(r, m.runId, lease);
    });
  }

  async getMeta(runId) {
    const r = this.read('get', 'SELECT status, segments, payload FROM meta WHERE run_id = ?', runId);
    return r === undefined ? null : { runId, status: r.status, segments: r.segments, payload: view(r.payload) };
  }

  async listRuns() {
    return this.read('all', 'SELECT run_id, status, segments, payload FROM meta ORDER BY run_id')
      .map((r) => ({ runId: r.run_id, status: r.status, segments: r.segments, payload: view(r.payload) }));
  }

  /** Removes the run's journal and meta, not its blobs; the tenure (and the epoch mark) stay. */
  async delete(runId, lease) {
    this.fenced(runId, lease, (pin) => {
      this.run(`DELETE FROM journal WHERE run_id = ? AND ${pin.sql}`, runId, ...pin.args);
      this.run(`DELETE FROM meta WHERE run_id = ? AND ${pin.sql}`, runId, ...pin.args);
    });
  }

  close() {
    if (this.db.open) this.db.close();
  }
}

function integer(options, key, fallback) {
  if (options[key] === undefined) return fallback;
  const n = Number(options[key]);
  if (!Number.isSafeInteger(n) || n < 0) throw new TypeError(`option ${key}=${options[key]} is not a whole number of ms`);
  return n;
}

/** The factory for a store class: parses soak's string options and opens `<location>/<file>`. */
export async function openWith(cls, { location, leaseTtlMs, options = {} }) {
  const unknown = Object.keys(options).filter((k) => !OPTIONS.has(k));
  if (unknown.length) throw new TypeError(`unknown option ${unknown.join(', ')}: this store takes ${[...OPTIONS].join(', ')}`);
  const synchronous = String(options.synchronous ?? 'NORMAL').toUpperCase();
  if (!SYNCHRONOUS.has(synchronous)) throw new TypeError(`option synchronous=${options.synchronous} is not one of ${[...SYNCHRONOUS]}`);
  return cls.open(join(location, options.file ?? 'store.db'), {
    leaseTtlMs,
    busyTimeoutMs: integer(options, 'busy_timeout_ms', 5000),
    bootTimeoutMs: integer(options, 'boot_timeout_ms', 15000),
    synchronous,
  });
}

export const storeName = 'js-sqlite-example';

export function createStore(ctx) {
  return openWith(SqliteStore, ctx);
}
