// Faults the Talos simulator can be told to inject for one node, either through its
// API (TalosSimulator.injectFault) or through annotations on the Node — which works
// across processes, e.g. against the sandbox's own simulator:
//
//   sandbox.gatehouse.dev/talos-fault: upgrade-error,hang:Version,lost-reply:Reboot
//   sandbox.gatehouse.dev/talos-fault-message: "disk /dev/sda is read-only"
//   sandbox.gatehouse.dev/boot-delay: 5s
//   sandbox.gatehouse.dev/shutdown-delay: 2m

export const TALOS_FAULT_ANNOTATION = 'sandbox.gatehouse.dev/talos-fault';
export const TALOS_FAULT_MESSAGE_ANNOTATION = 'sandbox.gatehouse.dev/talos-fault-message';
/** How long the node stays down when it reboots (a Go duration); overrides the simulator's default. */
export const BOOT_DELAY_ANNOTATION = 'sandbox.gatehouse.dev/boot-delay';
/**
 * How long the node keeps running after it acknowledged a reboot, an upgrade or a reset
 * before it goes down (a Go duration; default the simulator's shutdown delay): Talos's
 * sequences take their time — the legacy upgrade drains inside machined, up to 5 minutes.
 */
export const SHUTDOWN_DELAY_ANNOTATION = 'sandbox.gatehouse.dev/shutdown-delay';

export const DEFAULT_FAULT_MESSAGE = 'simulated failure injected by the Talos simulator';

export type TalosFault =
  /** The upgrade fails: legacy Upgrade answers with an error, LifecycleService.Upgrade exits non-zero. */
  | { kind: 'upgrade-error'; message: string }
  /** ImageService.Pull fails with an error. */
  | { kind: 'pull-error'; message: string }
  /** Every call fails with an error status. */
  | { kind: 'error'; method?: string; message: string }
  /** The node goes down for a reboot (or upgrade) and never comes back. */
  | { kind: 'never-return' }
  /** The call never answers (all methods, or the one named). */
  | { kind: 'hang'; method?: string }
  /** The call is carried out, but its reply never arrives (all methods, or the one named). */
  | { kind: 'lost-reply'; method?: string }
  /**
   * The call answers UNIMPLEMENTED although the osImage's version has it: a node whose
   * osImage does not tell the truth (all methods, or the one named).
   */
  | { kind: 'unimplemented'; method?: string };

export type TalosFaultKind = TalosFault['kind'];

const KINDS: readonly TalosFaultKind[] = [
  'upgrade-error',
  'pull-error',
  'error',
  'never-return',
  'hang',
  'lost-reply',
  'unimplemented',
];

/** Methods a fault can be limited to (`hang:Reboot`), as the simulator names its handlers. */
export const FAULT_METHODS = [
  'Version',
  'Reboot',
  'Shutdown',
  'Reset',
  'ApplyConfiguration',
  'Upgrade',
  'ImagePull',
  'LifecycleUpgrade',
  'EtcdMemberList',
  'EtcdStatus',
  'EtcdAlarmList',
  'EtcdForfeitLeadership',
  'EtcdLeaveCluster',
  'EtcdRemoveMemberByID',
  'EtcdSnapshot',
  'Rollback',
  'MachineConfigGet',
] as const;

/** Parses the fault annotation: comma-separated `kind` or `kind:Method`. */
export function parseFaults(annotation: string | undefined, message: string | undefined): TalosFault[] {
  const text = annotation?.trim() ?? '';
  if (text === '') return [];
  const msg = message?.trim() || DEFAULT_FAULT_MESSAGE;
  return text.split(',').map((entry) => {
    const [kind = '', method, ...rest] = entry.trim().split(':');
    if (!KINDS.includes(kind as TalosFaultKind))
      throw new Error(`${TALOS_FAULT_ANNOTATION}: unknown fault "${kind}" (known: ${KINDS.join(', ')})`);
    if (rest.length > 0 || (method !== undefined && !(FAULT_METHODS as readonly string[]).includes(method)))
      throw new Error(
        `${TALOS_FAULT_ANNOTATION}: "${entry.trim()}" names no method the simulator has (${FAULT_METHODS.join(', ')})`,
      );
    switch (kind as TalosFaultKind) {
      case 'upgrade-error':
        return { kind: 'upgrade-error', message: msg };
      case 'pull-error':
        return { kind: 'pull-error', message: msg };
      case 'error':
        return method ? { kind: 'error', method, message: msg } : { kind: 'error', message: msg };
      case 'never-return':
        return { kind: 'never-return' };
      case 'hang':
        return method ? { kind: 'hang', method } : { kind: 'hang' };
      case 'lost-reply':
        return method ? { kind: 'lost-reply', method } : { kind: 'lost-reply' };
      case 'unimplemented':
        return method ? { kind: 'unimplemented', method } : { kind: 'unimplemented' };
    }
  });
}

/** The first fault of `kind` that applies to `method`. */
export function faultFor<K extends TalosFaultKind>(
  faults: readonly TalosFault[],
  kind: K,
  method: string,
): Extract<TalosFault, { kind: K }> | undefined {
  return faults.find(
    (f): f is Extract<TalosFault, { kind: K }> =>
      f.kind === kind && (!('method' in f) || f.method === undefined || f.method === method),
  );
}
