// Step-mode strikes in the child (docs/wire.md, sections 4 and 7): a request may ask the shim to stop
// its own process (SIGSTOP) at boundary k of the store's handling of it, the way soak's worker stops
// itself at the k-th call or return its profile hook sees in a Python store. JavaScript has no
// profile hook, so the boundaries the shim counts are the ones it can see without changing what the
// store does: every call into and return from a method of the store's own objects (the journal and
// transcript objects, own and inherited methods alike, wrapped on the instance for the struck call
// only, `this` unchanged, so private fields keep working), and every async continuation that runs
// during the call (an `await` resuming). A store whose fence check and write are two method calls, or
// two awaits, has its window open at one of those boundaries.
//
// The boundaries next to the call's exchanges with the database are where such a window opens: across
// processes a store can only race another between two of its own exchanges with what they share. A driver
// whose round trips run in compiled code (better-sqlite3's statements, a socket's reply) shows only as a wait
// between two boundaries, so the shim times every gap and reports, with the count, the boundaries that end a
// wait (`waits`: the boundary at which an exchange had returned): a gap of WAIT_FLOOR_NS or more and at least
// WAIT_RATIO times the call's median gap. The worker strikes half its step strikes next to them.

import { createHook } from 'node:async_hooks';

/** A gap between two boundaries is a wait (an exchange) from this many ns and WAIT_RATIO x the median gap. */
export const WAIT_FLOOR_NS = 2000;
export const WAIT_RATIO = 4;
const now = () => process.hrtime.bigint();

/**
 * The boundaries (2..n) that end a wait, from the instants of boundaries 1..n; `held` is the one stopped at, and
 * boundaries from `end` on (the shim's own continuations once the store's call settled) are not the store's.
 */
export function waits(instants, held = 0, end = Infinity) {
  const gaps = [];
  for (let i = 1; i < instants.length; i += 1) gaps.push(Number(instants[i] - instants[i - 1]));
  if (!gaps.length) return [];
  const sorted = [...gaps].sort((a, b) => a - b);
  const bar = Math.max(WAIT_FLOOR_NS, WAIT_RATIO * sorted[Math.floor(sorted.length / 2)]);
  const out = [];
  gaps.forEach((gap, i) => {
    if (gap >= bar && i + 1 !== held && i + 2 < end) out.push(i + 2); // gaps[i] lies between boundaries i+1 and i+2
  });
  return out;
}

/** Wrap every method reachable on `obj` so that each call and return ticks; returns the undo. */
function instrument(obj, tick) {
  if (obj === null || typeof obj !== 'object' || !Object.isExtensible(obj)) return () => {};
  const names = new Set();
  for (let p = obj; p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      if (name === 'constructor' || names.has(name)) continue;
      const d = Object.getOwnPropertyDescriptor(p, name);
      if (d && 'value' in d && typeof d.value === 'function') names.add(name);
    }
  }
  const undo = [];
  for (const name of names) {
    const own = Object.getOwnPropertyDescriptor(obj, name);
    if (own && !own.configurable) continue;
    const orig = obj[name];
    if (/^class[\s{]/.test(Function.prototype.toString.call(orig))) continue; // a class held as a value
    function counted(...args) {
      tick();
      try {
        return new.target ? Reflect.construct(orig, args, new.target) : orig.apply(this, args);
      } finally {
        tick();
      }
    }
    Object.defineProperty(obj, name, { value: counted, writable: true, configurable: true, enumerable: false });
    undo.push(() => (own ? Object.defineProperty(obj, name, own) : delete obj[name]));
  }
  return () => undo.reverse().forEach((f) => f());
}

/** Counts a struck call's boundaries and stops the process at the k-th. */
export class Steps {
  constructor(stop = () => process.kill(process.pid, 'SIGSTOP')) {
    this.stop = stop;
    this.k = 0;
    this.seen = 0;
    this.instants = [];
    this.end = Infinity;
    this.undo = null;
    this.hook = createHook({ before: () => this.tick() });
  }

  tick() {
    this.seen += 1;
    this.instants.push(now());
    if (this.seen === this.k) this.stop();
  }

  /** Start counting the boundaries of the call about to be made on `objects`; stop at the k-th (never for 0). */
  arm(k, objects) {
    this.k = k;
    this.seen = 0;
    this.instants = [];
    this.end = Infinity;
    const undos = [...new Set(objects)].map((o) => instrument(o, () => this.tick()));
    this.undo = () => undos.forEach((f) => f());
    this.hook.enable();
  }

  /** `result` is what the struck call returned: the boundaries from its settling on are the shim's, not the store's. */
  settling(result) {
    if (this.undo === null) return;
    const mark = () => {
      if (this.undo !== null && this.end === Infinity) this.end = this.seen;
    };
    Promise.resolve(result).then(mark, mark);
  }

  /** End the count; returns the boundaries the call made and those that ended a wait (`waits`). */
  disarm() {
    this.hook.disable();
    this.undo?.();
    this.undo = null;
    // the gap after the stop is the hold, not an exchange; a stop past the last boundary never happened
    const ended = waits(this.instants, this.k > 0 && this.k <= this.seen ? this.k : 0, this.end);
    this.k = 0;
    this.instants = [];
    this.end = Infinity;
    return { seen: this.seen, waits: ended };
  }
}
