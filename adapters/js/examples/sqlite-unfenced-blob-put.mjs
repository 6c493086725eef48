// BROKEN on purpose: sqlite-store.mjs whose transcript put ignores the lease (the seed RFC's F2:
// a stale checkpoint save overwrites the successor's blob), while the store still declares
// fencedWrites on both halves. Broken clause: `stale-rejected`.

import { SqliteStore, SqliteTranscripts, openWith } from './sqlite-store.mjs';

class UnfencedPutTranscripts extends SqliteTranscripts {
  async put(ref, blob, _lease) {
    return super.put(ref, blob); // the lease is dropped: an unleased write always passes
  }
}

class UnfencedBlobPutStore extends SqliteStore {
  static Transcripts = UnfencedPutTranscripts;
}

export const storeName = 'js-sqlite-unfenced-blob-put';

export function createStore(ctx) {
  return openWith(UnfencedBlobPutStore, ctx);
}
