// Step-mode strikes in the child (docs/wire.md, sections 4 and 7): a request may ask the shim to stop
// its own process (SIGSTOP) at boundary k of the store's handling of it, the way soak's worker stops
// itself at the k-th call or return its profile hook sees in a Python store. JavaScript has no
// profile hook, so the boundaries the shim counts are the ones it can see without changing what the
// store does: every call into and return from a method of the store's own objects (the journal and
// transcript objects, own and inherited methods alike, wrapped on the instance for the struck call
// only, `this` unchanged, so private fields keep working), and every async continuation that runs
// during the call (an `await` resuming). A store whose fence check and write are two method calls, or
// two awaits, has its window open at one of those boundaries.

import { createHook } from 'node:async_hooks';

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
    this.undo = null;
    this.hook = createHook({ before: () => this.tick() });
  }

  tick() {
    this.seen += 1;
    if (this.seen === this.k) this.stop();
  }

  /** Start counting the boundaries of the call about to be made on `objects`; stop at the k-th. */
  arm(k, objects) {
    this.k = k;
    this.seen = 0;
    const undos = [...new Set(objects)].map((o) => instrument(o, () => this.tick()));
    this.undo = () => undos.forEach((f) => f());
    this.hook.enable();
  }

  /** End the count; returns the boundaries the call made. */
  disarm() {
    this.hook.disable();
    this.undo?.();
    this.undo = null;
    this.k = 0;
    return this.seen;
  }
}
