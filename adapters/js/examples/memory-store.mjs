// An in-memory fenced run store written to the seed RFC's SPI: the journal store with leases,
// meta and fenced writes, and its transcript (blob) store in the same fencing domain.
//
// Its state lives in the memory of the process that created it, so it is single-process by
// nature, like soak's own `memory:`: under the shim every store object is its own child process,
// so two objects never share state. Use it for one-object suites (`soak model`); the storm's
// workers, each with its own child, would each see a store of their own.
//
// Its methods answer with plain values (the SPI allows values or Promises; the sqlite example
// answers with Promises). Refusals are plain Errors carrying a `code` (`lease_held`, `journal_order`), the Node style;
// the shim classifies them by that code.

const STATUSES = new Set(['running', 'suspended', 'completed', 'failed', 'cancelled']);

function refusal(code, message, extra = {}) {
  return Object.assign(new Error(message), { code }, extra);
}

function runOfRef(ref) {
  const i = ref.indexOf('/');
  if (i <= 0 || i === ref.length - 1) throw new TypeError(`blob ref ${JSON.stringify(ref)} is not "<runId>/<name>"`);
  return ref.slice(0, i);
}

const copy = (bytes) => new Uint8Array(bytes);

class MemoryTranscripts {
  fencedWrites = true;

  constructor(store) {
    this.store = store;
    this.blobs = new Map();
  }

  put(ref, blob, lease) {
    this.store.fence(runOfRef(ref), lease);
    this.blobs.set(ref, copy(blob));
  }

  get(ref) {
    const blob = this.blobs.get(ref);
    return blob === undefined ? null : copy(blob);
  }

  list(runId) {
    return [...this.blobs.keys()].filter((ref) => runOfRef(ref) === runId).sort();
  }

  delete(ref, lease) {
    this.store.fence(runOfRef(ref), lease);
    this.blobs.delete(ref);
  }
}

export class MemoryStore {
  fencedWrites = true;

  constructor({ leaseTtlMs, clock = Date.now }) {
    this.leaseTtlMs = leaseTtlMs;
    this.clock = clock;
    this.leases = new Map(); // runId -> {owner, epoch, expiresAt, released}; never deleted: the epoch high-water mark
    this.journals = new Map(); // runId -> [{seq, payload}]
    this.metas = new Map(); // runId -> RunMeta
    this.transcripts = new MemoryTranscripts(this);
  }

  holder(runId) {
    const row = this.leases.get(runId);
    if (!row || row.released || this.clock() >= row.expiresAt) return null;
    return { runId, owner: row.owner, epoch: row.epoch };
  }

  /** Refuse unless `lease` is the run's current unreleased tenure (and, unless allowed, unexpired). */
  check(runId, lease, { allowExpired = false } = {}) {
    const row = this.leases.get(runId);
    if (lease.runId !== runId) {
      throw refusal('lease_held', `lease for run ${lease.runId} used on run ${runId}`, { runId, holder: this.holder(runId) });
    }
    if (!row || row.released || row.owner !== lease.owner || row.epoch !== lease.epoch) {
      throw refusal('lease_held', `lease epoch ${lease.epoch} of ${lease.owner} is not the current tenure`, { runId, holder: this.holder(runId) });
    }
    if (!allowExpired && this.clock() >= row.expiresAt) {
      throw refusal('lease_held', `lease epoch ${lease.epoch} has expired`, { runId, holder: null });
    }
    return row;
  }

  /** The fence of a mutation: none without a lease (single-writer use). */
  fence(runId, lease) {
    if (lease !== undefined && lease !== null) this.check(runId, lease);
  }

  acquire(runId, owner) {
    const live = this.holder(runId);
    if (live) throw refusal('lease_held', `run ${runId} is held by ${live.owner}`, { runId, holder: live });
    const epoch = (this.leases.get(runId)?.epoch ?? 0) + 1;
    this.leases.set(runId, { owner, epoch, expiresAt: this.clock() + this.leaseTtlMs, released: false });
    return { runId, owner, epoch };
  }

  renew(lease) {
    this.check(lease.runId, lease).expiresAt = this.clock() + this.leaseTtlMs;
    return lease;
  }

  release(lease) {
    this.check(lease.runId, lease, { allowExpired: true }).released = true;
  }

  append(runId, e, lease) {
    this.fence(runId, lease);
    const journal = this.journals.get(runId) ?? [];
    const tail = journal.length ? journal[journal.length - 1].seq : 0;
    if (e.seq <= tail) throw refusal('journal_order', `append seq ${e.seq} to run ${runId} is not above the tail ${tail}`);
    journal.push({ seq: e.seq, payload: copy(e.payload) });
    this.journals.set(runId, journal);
  }

  load(runId) {
    return (this.journals.get(runId) ?? []).map((e) => ({ seq: e.seq, payload: copy(e.payload) }));
  }

  putMeta(m, lease) {
    if (!STATUSES.has(m.status)) throw new TypeError(`RunMeta.status ${JSON.stringify(m.status)} is not one of ${[...STATUSES]}`);
    this.fence(m.runId, lease);
    this.metas.set(m.runId, { runId: m.runId, status: m.status, segments: m.segments, payload: copy(m.payload) });
  }

  getMeta(runId) {
    const m = this.metas.get(runId);
    return m ? { ...m, payload: copy(m.payload) } : null;
  }

  listRuns() {
    return [...this.metas.keys()].sort().map((runId) => ({ ...this.metas.get(runId), payload: copy(this.metas.get(runId).payload) }));
  }

  delete(runId, lease) {
    this.fence(runId, lease);
    this.journals.delete(runId);
    this.metas.delete(runId);
  }
}

export const storeName = 'js-memory-example';

export function createStore({ leaseTtlMs }) {
  return new MemoryStore({ leaseTtlMs });
}
