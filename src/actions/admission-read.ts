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

/** What the pass reads of an action here: its name and version. */
interface Versioned {
  metadata: { name: string; resourceVersion?: string };
}

/**
 * Other instances' unfinished actions, for a pass counting from its caches: those of the
 * last quorum read, unless the other instances' informer shows a newer version of one
 * that is finished (or, having watched past that read, no longer shows it), and those the
 * informer shows unfinished. Sound only while this instance has held the turn
 * (src/kube/turn.ts) since that read — no other instance admits meanwhile, so no slot of
 * theirs is missing from it — and the informer, which may lag, only frees slots early
 * never: a slot it has not seen freed stays counted.
 */
export function foreignUnfinished<T extends Versioned>(
  atQuorum: { items: readonly T[]; resourceVersion?: string },
  cache: { items: readonly T[]; watched?: string },
  finished: (action: T) => boolean,
): T[] {
  const cached = new Map(cache.items.map((a) => [a.metadata.name, a]));
  const watched = parseResourceVersion(cache.watched);
  const read = parseResourceVersion(atQuorum.resourceVersion);
  const out = new Map<string, T>();
  for (const a of atQuorum.items) {
    const seen = cached.get(a.metadata.name);
    const v = parseResourceVersion(a.metadata.resourceVersion);
    const w = parseResourceVersion(seen?.metadata.resourceVersion);
    if (seen) {
      const newer = v !== undefined && w !== undefined && w >= v;
      out.set(a.metadata.name, newer ? seen : a);
    } else if (watched === undefined || read === undefined || watched < read) {
      out.set(a.metadata.name, a); // not seen gone: it still counts
    }
  }
  for (const a of cache.items) if (!out.has(a.metadata.name)) out.set(a.metadata.name, a);
  return [...out.values()].filter((a) => !finished(a));
}
