// BROKEN on purpose: memory-store.mjs whose putMeta ignores the lease (the seed RFC's F1: a stale
// settle overwrites the successor's meta). It still declares fencedWrites, so soak must fail it
// on `stale-rejected`.

import { MemoryStore } from './memory-store.mjs';

class UnfencedMetaStore extends MemoryStore {
  putMeta(m, _lease) {
    return super.putMeta(m); // the lease is dropped: an unleased write always passes
  }
}

export const storeName = 'js-memory-unfenced-meta';

export function createStore({ leaseTtlMs }) {
  return new UnfencedMetaStore({ leaseTtlMs });
}
