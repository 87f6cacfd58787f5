// What a `talosctl` command line asks for, read strictly: which gatehouse action it is
// (reboot, upgrade, shutdown, reset, apply-config), on which nodes, and the same command
// line for each node alone. Anything not understood is refused with the reason: a
// wrapper that guesses could let an action through ungated, or gate the wrong one.
import type { RequestSpec } from './backend.ts';

/** A talosctl flag: whether it takes a value, its short form, and whether it may repeat (a list). */
interface FlagShape {
  value: boolean;
  short?: string;
  list?: boolean;
}

/** Flags every talosctl command takes (talosctl's persistent flags). `-n/--nodes` is handled apart. */
const GLOBAL_FLAGS: Record<string, FlagShape> = {
  talosconfig: { value: true },
  context: { value: true },
  endpoints: { value: true, short: 'e' },
  cluster: { value: true },
};

const WAIT_FLAGS: Record<string, FlagShape> = {
  wait: { value: false },
  timeout: { value: true },
  debug: { value: false },
};

/** The subcommands understood, and the flags of each. */
const SUBCOMMAND_FLAGS = {
  reboot: { ...WAIT_FLAGS, mode: { value: true, short: 'm' } },
  upgrade: {
    ...WAIT_FLAGS,
    image: { value: true, short: 'i' },
    stage: { value: false, short: 's' },
    force: { value: false, short: 'f' },
    preserve: { value: false, short: 'p' },
    'reboot-mode': { value: true },
  },
  shutdown: { ...WAIT_FLAGS, force: { value: false } },
  reset: {
    ...WAIT_FLAGS,
    graceful: { value: false },
    reboot: { value: false },
    'wipe-mode': { value: true },
    'system-labels-to-wipe': { value: true, list: true },
    'user-disks-to-wipe': { value: true, list: true },
  },
  'apply-config': {
    file: { value: true, short: 'f' },
    mode: { value: true, short: 'm' },
    'config-patch': { value: true, short: 'p' },
    timeout: { value: true },
    'dry-run': { value: false },
    insecure: { value: false, short: 'i' },
  },
} satisfies Record<string, Record<string, FlagShape>>;

export type Subcommand = keyof typeof SUBCOMMAND_FLAGS;
export const SUBCOMMANDS = Object.keys(SUBCOMMAND_FLAGS) as Subcommand[];

/** One flag as given: its long name, its value (booleans: 'true'/'false'), and the words it took. */
interface GivenFlag {
  name: string;
  value: string;
  words: string[];
}

export interface TalosctlCommand {
  subcommand: Subcommand;
  /** The -n/--nodes values, in order (comma lists split). */
  nodes: string[];
  /** The gatehouse request for a node, less its name. */
  request: Omit<RequestSpec, 'nodeName'>;
  /** The talosctl command line for one node: every word as given, the node flags replaced. */
  argsFor(node: string): string[];
}

export class TalosctlRefusal extends Error {
  override readonly name = 'TalosctlRefusal';
}

function refuse(message: string): never {
  throw new TalosctlRefusal(message);
}

function isNodeFlag(word: string): boolean {
  return word === '-n' || word === '--nodes' || word.startsWith('--nodes=') || /^-n.+/.test(word);
}

/** Reads the flag at `words[i]`, against the known shapes; refuses what it does not know. */
function readFlag(
  words: readonly string[],
  i: number,
  shapes: Record<string, FlagShape>,
  where: string,
): GivenFlag {
  const word = words[i] ?? '';
  let name: string;
  let inline: string | undefined;
  if (word.startsWith('--')) {
    const eq = word.indexOf('=');
    name = eq < 0 ? word.slice(2) : word.slice(2, eq);
    inline = eq < 0 ? undefined : word.slice(eq + 1);
  } else {
    const short = word.slice(1, 2);
    name = Object.entries(shapes).find(([, s]) => s.short === short)?.[0] ?? '';
    if (!name)
      refuse(`talosctl ${where}: unknown flag ${word}; gatehouse passes on only the flags it understands`);
    if (word.length > 2) inline = word.slice(2).replace(/^=/, '');
  }
  const shape = shapes[name];
  if (!shape)
    refuse(`talosctl ${where}: unknown flag --${name}; gatehouse passes on only the flags it understands`);
  if (!shape.value) {
    if (inline !== undefined && inline !== 'true' && inline !== 'false') {
      refuse(`talosctl ${where}: --${name} is true or false, not ${inline}`);
    }
    return { name, value: inline ?? 'true', words: [word] };
  }
  if (inline !== undefined) return { name, value: inline, words: [word] };
  const value = words[i + 1];
  if (value === undefined || value.startsWith('-')) refuse(`talosctl ${where}: --${name} needs a value`);
  return { name, value, words: [word, value] };
}

const REBOOT_MODES = { default: 'Default', powercycle: 'PowerCycle', force: 'Force' } as const;
const WIPE_MODES = { all: 'All', 'system-disk': 'SystemDisk', 'user-disks': 'UserDisks' } as const;
const APPLY_MODES = { 'no-reboot': 'NoReboot', reboot: 'Reboot', staged: 'Staged', try: 'Try' } as const;

function pick<V extends string>(table: Readonly<Record<string, V>>, value: string, what: string): V {
  const found = Object.entries(table).find(([k]) => k === value.toLowerCase())?.[1];
  if (found === undefined)
    refuse(`${what} ${value} is not one gatehouse understands (${Object.keys(table).join(', ')})`);
  return found;
}

/** The gatehouse request the subcommand and its flags stand for. */
function requestOf(
  subcommand: Subcommand,
  flags: ReadonlyMap<string, string>,
): Omit<RequestSpec, 'nodeName'> {
  const base = { execution: 'External' as const };
  switch (subcommand) {
    case 'reboot': {
      const mode = flags.get('mode');
      return {
        ...base,
        action: 'Reboot',
        ...(mode ? { reboot: { mode: pick(REBOOT_MODES, mode, 'talosctl reboot --mode') } } : {}),
      };
    }
    case 'upgrade': {
      const image = flags.get('image');
      if (!image) refuse('talosctl upgrade needs --image: gatehouse records which image the node goes to');
      const stage = flags.get('stage') === 'true';
      return { ...base, action: 'Upgrade', upgrade: { image, ...(stage ? { stage: true } : {}) } };
    }
    case 'shutdown':
      return { ...base, action: 'Shutdown' };
    case 'reset':
      return { ...base, action: 'Reset', ...resetOf(flags) };
    case 'apply-config': {
      if (flags.get('insecure') === 'true') {
        refuse(
          'talosctl apply-config --insecure talks to a node in maintenance mode, which is no cluster member to gate',
        );
      }
      if (flags.get('dry-run') === 'true')
        refuse('talosctl apply-config --dry-run changes nothing: run it directly');
      const mode = flags.get('mode');
      if (!mode || mode === 'auto') {
        refuse(
          'talosctl apply-config needs --mode no-reboot, reboot, staged or try: with auto, gatehouse could not know whether the node reboots',
        );
      }
      return {
        ...base,
        action: 'ConfigChange',
        configChange: { mode: pick(APPLY_MODES, mode, 'talosctl apply-config --mode') },
      };
    }
  }
}

const list = (value: string | undefined) =>
  (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

/** The system partitions a SystemData reset names (Talos ≥ 1.14.0-beta.1 also ETCD, CRI, KUBELET, LOG). */
const SYSTEM_DATA_LABELS = ['STATE', 'EPHEMERAL', 'ETCD', 'CRI', 'KUBELET', 'LOG'];

/**
 * The reset a talosctl reset asks for. `--user-disks-to-wipe` are recorded as they are;
 * `--system-labels-to-wipe` is what gatehouse calls SystemData when it names STATE and
 * EPHEMERAL (with, at most, the 1.14 system volumes): other partition lists have no
 * gatehouse mode, and are refused rather than recorded as something else.
 */
function resetOf(flags: ReadonlyMap<string, string>): Pick<RequestSpec, 'reset'> {
  const wipe = flags.get('wipe-mode');
  const graceful = flags.get('graceful') !== 'false';
  const labels = list(flags.get('system-labels-to-wipe')).map((l) => l.toUpperCase());
  const userDisks = list(flags.get('user-disks-to-wipe'));
  let wipeMode: 'All' | 'SystemDisk' | 'UserDisks' | 'SystemData' | undefined = wipe
    ? pick(WIPE_MODES, wipe, 'talosctl reset --wipe-mode')
    : undefined;
  if (labels.length > 0) {
    if (
      !labels.includes('STATE') ||
      !labels.includes('EPHEMERAL') ||
      labels.some((l) => !SYSTEM_DATA_LABELS.includes(l))
    )
      refuse(
        `talosctl reset --system-labels-to-wipe ${labels.join(',')}: gatehouse gates a partition wipe of STATE and EPHEMERAL (with ETCD, CRI, KUBELET, LOG) as wipe mode SystemData; name both, and no other partition`,
      );
    if (wipeMode === 'UserDisks') refuse('talosctl reset: --wipe-mode user-disks wipes no system partition');
    wipeMode = 'SystemData';
  }
  if (wipeMode === 'UserDisks' && userDisks.length === 0)
    refuse(
      'talosctl reset --wipe-mode user-disks needs --user-disks-to-wipe: Talos wipes only the disks it is given',
    );
  const reset = {
    ...(graceful ? {} : { graceful: false }),
    ...(wipeMode ? { wipeMode } : {}),
    ...(userDisks.length > 0 && wipeMode !== 'SystemData' ? { userDisks } : {}),
  };
  return Object.keys(reset).length > 0 ? { reset } : {};
}

/**
 * Reads a talosctl command line (the words after `talosctl`).
 *
 * @example parseTalosctl(['-n', '10.0.0.2,10.0.0.3', 'reboot']).nodes // ['10.0.0.2', '10.0.0.3']
 */
export function parseTalosctl(words: readonly string[]): TalosctlCommand {
  const nodes: string[] = [];
  /** The words kept for every node, with the place where the node flag goes. */
  const kept: string[] = [];
  let subcommand: Subcommand | undefined;
  const flags = new Map<string, string>();
  for (let i = 0; i < words.length;) {
    const word = words[i] ?? '';
    if (isNodeFlag(word)) {
      let value: string | undefined;
      if (word === '-n' || word === '--nodes') {
        value = words[i + 1];
        i += 2;
      } else {
        value = word.startsWith('--nodes=') ? word.slice('--nodes='.length) : word.slice(2).replace(/^=/, '');
        i += 1;
      }
      if (!value || value.startsWith('-')) refuse('talosctl: -n/--nodes needs a node');
      nodes.push(
        ...value
          .split(',')
          .map((n) => n.trim())
          .filter(Boolean),
      );
      continue;
    }
    if (word === '--') refuse('talosctl: arguments after -- are not understood');
    if (word.startsWith('-')) {
      const shapes: Record<string, FlagShape> = subcommand
        ? { ...GLOBAL_FLAGS, ...SUBCOMMAND_FLAGS[subcommand] }
        : GLOBAL_FLAGS;
      const flag = readFlag(words, i, shapes, subcommand ?? '(before the command)');
      const earlier = flags.get(flag.name);
      flags.set(flag.name, shapes[flag.name]?.list && earlier ? `${earlier},${flag.value}` : flag.value);
      kept.push(...flag.words);
      i += flag.words.length;
      continue;
    }
    if (subcommand !== undefined) {
      refuse(
        `talosctl ${subcommand}: unexpected argument ${word}; gatehouse passes on only what it understands`,
      );
    }
    if (!(SUBCOMMANDS as string[]).includes(word)) {
      refuse(
        `talosctl ${word} is not a command gatehouse gates (${SUBCOMMANDS.join(', ')}); run it without gatehouse if it needs no gate`,
      );
    }
    subcommand = word as Subcommand;
    kept.push(word);
    i += 1;
  }
  if (subcommand === undefined) refuse(`no talosctl command: one of ${SUBCOMMANDS.join(', ')}`);
  if (nodes.length === 0) {
    refuse(
      'talosctl: name the nodes with -n/--nodes: without them talosctl acts on its endpoint, which gatehouse cannot tell',
    );
  }
  const duplicate = nodes.find((n, i) => nodes.indexOf(n) !== i);
  if (duplicate !== undefined) refuse(`talosctl: node ${duplicate} is named twice`);
  const request = requestOf(subcommand, flags);
  return {
    subcommand,
    nodes,
    request,
    argsFor: (node) => ['-n', node, ...kept],
  };
}
