// Where the admission pass may count slots from: a quorum read of every unfinished
// action, or the controller's own cache when the cache provably shows every slot taken.
//
// Only the admission pass takes slots (Pending → WaitingForHealth), only the leader runs
// it, and every slot it takes is a status write of its own. So once this replica has
// made one quorum read while leading — which shows every slot an earlier leader took —
// its cache is complete for counting as soon as its watch has delivered everything up
// to that read and up to its own last write: a watch delivers changes in revision
// order. What the cache may still lag on (an action finished or deleted a moment ago)
// only makes it count a slot too many: it waits, it never admits beyond a budget.
//
// resourceVersions are compared as numbers, as Kubernetes 1.35 documents them to be
// (KEP-5504); one that is not a decimal number sends the pass back to the quorum read.

export interface AdmissionReadState {
  /** The resourceVersion of the last quorum read made while leading; undefined: none since. */
  quorum?: bigint;
  /** The newest resourceVersion any NodeAction write of this replica returned. */
  written?: bigint;
}

/** A resourceVersion as a number, when it is one. */
export function parseResourceVersion(rv: string | undefined): bigint | undefined {
  return rv !== undefined && /^[0-9]{1,30}$/.test(rv) ? BigInt(rv) : undefined;
}

/** The state after a write of ours that returned `rv`. */
export function afterWrite(state: AdmissionReadState, rv: string | undefined): AdmissionReadState {
  const v = parseResourceVersion(rv);
  if (v === undefined) return { ...state, quorum: undefined };
  return { ...state, written: state.written === undefined || v > state.written ? v : state.written };
}

/**
 * Whether the cache, whose watch has delivered everything up to `watched`, shows every
 * slot taken: there was a quorum read since this replica began leading, and the watch
 * has reached both it and our own last write.
 */
export function cacheShowsEverySlot(state: AdmissionReadState, watched: string | undefined): boolean {
  const w = parseResourceVersion(watched);
  if (state.quorum === undefined || w === undefined) return false;
  return w >= state.quorum && (state.written === undefined || w >= state.written);
}
