// BROKEN on purpose: sqlite-store.mjs whose release deletes the run's lease row, so the epoch
// high-water mark goes with it and the next acquire issues epoch 1 again: a holder of the old
// epoch 1 is then taken for the new tenure. Broken clause: `epoch-monotonic`.

import { SqliteStore, openWith } from './sqlite-store.mjs';

class EpochResetStore extends SqliteStore {
  async release(lease) {
    this.fenced(lease.runId, lease, (pin) => {
      const r = this.run(`DELETE FROM leases WHERE run_id = ? AND ${pin.sql}`, lease.runId, ...pin.args);
      this.pinned(r, lease.runId, lease);
    }, { allowExpired: true });
  }
}

export const storeName = 'js-sqlite-epoch-reset';

export function createStore(ctx) {
  return openWith(EpochResetStore, ctx);
}
