// A stand-in for `talosctl` (the real one cannot be installed here) for the tests of
// `gatehouse talosctl`: it reads the few command lines those tests give it and makes the
// same Talos API call talosctl would, with the project's Talos client, against the
// sandbox's Talos simulator ($TALOSCONFIG or --talosconfig). Every invocation is
// appended to $TALOSCTL_STANDIN_LOG as one JSON line; a node named in
// $TALOSCTL_STANDIN_FAIL fails as an unreachable node does (exit 1, nothing called).
import { appendFileSync, readFileSync } from 'node:fs';
import { TalosClient } from '../../src/talos/client.ts';
import { loadTalosConfig } from '../../src/talos/config.ts';

const BOOLEAN = new Set([
  'wait',
  'debug',
  'stage',
  'force',
  'preserve',
  'graceful',
  'reboot',
  'dry-run',
  'insecure',
]);

function parse(words: string[]): { nodes: string[]; command: string; flags: Map<string, string> } {
  const nodes: string[] = [];
  const flags = new Map<string, string>();
  let command = '';
  for (let i = 0; i < words.length; i++) {
    const word = words[i] ?? '';
    if (word === '-n' || word === '--nodes') nodes.push(...(words[++i] ?? '').split(','));
    else if (word.startsWith('-')) {
      const [name = '', inline] = word.replace(/^-+/, '').split('=', 2);
      const long = { i: 'image', m: 'mode', f: command === 'apply-config' ? 'file' : 'force' }[name] ?? name;
      flags.set(long, inline ?? (BOOLEAN.has(long) ? 'true' : (words[++i] ?? '')));
    } else command = word;
  }
  return { nodes, command, flags };
}

const words = process.argv.slice(2);
if (process.env.TALOSCTL_STANDIN_LOG)
  appendFileSync(process.env.TALOSCTL_STANDIN_LOG, `${JSON.stringify(words)}\n`);
const { nodes, command, flags } = parse(words);
if (nodes.length !== 1) {
  process.stderr.write(`talosctl stand-in: expected exactly one node, got ${JSON.stringify(nodes)}\n`);
  process.exit(2);
}
const node = nodes[0] ?? '';
if (process.env.TALOSCTL_STANDIN_FAIL === node) {
  process.stderr.write(`error: rpc error: code = Unavailable desc = connection to ${node} refused\n`);
  process.exit(1);
}
const path = flags.get('talosconfig');
const client = new TalosClient(await loadTalosConfig(path ? { path } : {}), { timeoutMs: 20_000 });
try {
  switch (command) {
    case 'reboot':
      await client.reboot({ node, ...(flags.get('mode') === 'powercycle' ? { mode: 'powercycle' } : {}) });
      break;
    case 'shutdown':
      await client.shutdown({ node, force: flags.get('force') === 'true' });
      break;
    case 'reset':
      await client.reset({ node, graceful: flags.get('graceful') !== 'false' });
      break;
    case 'upgrade':
      await client.upgrade({ node, image: flags.get('image') ?? '', stage: flags.get('stage') === 'true' });
      break;
    case 'apply-config':
      await client.applyConfiguration({
        node,
        data: readFileSync(flags.get('file') ?? ''),
        mode: (flags.get('mode') ?? 'auto') as 'no-reboot',
      });
      break;
    default:
      process.stderr.write(`talosctl stand-in: ${command} is not simulated\n`);
      process.exit(2);
  }
  process.stdout.write(`${node}: ${command} accepted\n`);
} catch (error) {
  process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exitCode = 1;
} finally {
  client.close();
}
