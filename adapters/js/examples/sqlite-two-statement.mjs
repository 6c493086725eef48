// BROKEN on purpose: sqlite-store.mjs with the seed RFC's F3 bug. The fence check is one
// autocommit statement and the mutation the next, with no owner/epoch pin in the mutation: in one
// process the two run back to back, but across processes a takeover can land between them, and
// a stale append, meta write, blob write, renew or release then lands on the successor's tenure.
// Broken clause: `atomic-fence` (what the storm then sees: a stale write accepted,
// `stale-rejected`, or a successor's tenure changed under it).

import { SqliteStore, StoreBusyError, isBusy, openWith } from './sqlite-store.mjs';

class TwoStatementStore extends SqliteStore {
  fenced(runId, lease, mutate, options = {}) {
    let now = this.clock();
    if (lease !== undefined && lease !== null) {
      try {
        now = this.check(runId, lease, options); // statement 1: SELECT the lease row, autocommit
      } catch (err) {
        throw isBusy(err) ? new StoreBusyError(`sqlite busy: ${err.message}`) : err;
      }
    }
    return this.tx(() => mutate({ sql: '1', args: [], now })); // statement 2: the mutation, unpinned
  }
}

export const storeName = 'js-sqlite-two-statement';

export function createStore(ctx) {
  return openWith(TwoStatementStore, ctx);
}
