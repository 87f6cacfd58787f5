// What `gatehouse talosctl` makes of a talosctl command line: the action, the nodes, the
// command line for each node alone — and the refusals of everything it does not know.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseTalosctl, TalosctlRefusal } from '../../src/cli/talosctl-args.ts';

function refused(words: string[], pattern: RegExp): void {
  assert.throws(
    () => parseTalosctl(words),
    (error: unknown) => {
      assert.ok(error instanceof TalosctlRefusal, String(error));
      assert.match(error.message, pattern);
      return true;
    },
  );
}

describe('parseTalosctl', () => {
  it('reads the nodes of -n and --nodes, comma lists and repeats, and keeps every other word for each', () => {
    const c = parseTalosctl([
      '--talosconfig',
      '/tc',
      '-n',
      '10.0.0.2,10.0.0.3',
      'reboot',
      '--nodes=10.0.0.4',
      '--mode',
      'powercycle',
      '--wait=false',
    ]);
    assert.deepEqual(c.nodes, ['10.0.0.2', '10.0.0.3', '10.0.0.4']);
    assert.deepEqual(c.request, { execution: 'External', action: 'Reboot', reboot: { mode: 'PowerCycle' } });
    assert.deepEqual(c.argsFor('10.0.0.3'), [
      '-n',
      '10.0.0.3',
      '--talosconfig',
      '/tc',
      'reboot',
      '--mode',
      'powercycle',
      '--wait=false',
    ]);
    assert.deepEqual(parseTalosctl(['-n10.0.0.9', 'shutdown']).nodes, ['10.0.0.9']);
  });

  it('maps each subcommand to its action and parameters', () => {
    assert.deepEqual(parseTalosctl(['-n', 'a', 'upgrade', '-i', 'img:v1', '--stage']).request, {
      execution: 'External',
      action: 'Upgrade',
      upgrade: { image: 'img:v1', stage: true },
    });
    assert.deepEqual(
      parseTalosctl([
        '-n',
        'a',
        'reset',
        '--graceful=false',
        '--wipe-mode',
        'user-disks',
        '--user-disks-to-wipe',
        '/dev/sdb',
        '--user-disks-to-wipe=/dev/sdc',
      ]).request,
      {
        execution: 'External',
        action: 'Reset',
        reset: { graceful: false, wipeMode: 'UserDisks', userDisks: ['/dev/sdb', '/dev/sdc'] },
      },
    );
    // A partition wipe of the node's data (talosctl's --system-labels-to-wipe) is SystemData.
    assert.deepEqual(
      parseTalosctl(['-n', 'a', 'reset', '--system-labels-to-wipe', 'STATE,EPHEMERAL,ETCD']).request,
      { execution: 'External', action: 'Reset', reset: { wipeMode: 'SystemData' } },
    );
    assert.deepEqual(parseTalosctl(['-n', 'a', 'reboot', '--mode', 'force']).request, {
      execution: 'External',
      action: 'Reboot',
      reboot: { mode: 'Force' },
    });
    assert.deepEqual(parseTalosctl(['-n', 'a', 'apply-config', '-f', 'c.yaml', '--mode=no-reboot']).request, {
      execution: 'External',
      action: 'ConfigChange',
      configChange: { mode: 'NoReboot' },
    });
    assert.deepEqual(parseTalosctl(['-n', 'a', 'shutdown', '--force']).request, {
      execution: 'External',
      action: 'Shutdown',
    });
  });

  it('refuses what it does not understand instead of guessing', () => {
    refused(['-n', 'a', 'version'], /talosctl version is not a command gatehouse gates/);
    refused(['-n', 'a', 'reboot', '--bogus'], /unknown flag --bogus/);
    refused(['-n', 'a', 'reboot', '-x'], /unknown flag -x/);
    refused(['-n', 'a', 'reboot', 'extra'], /unexpected argument extra/);
    refused(['reboot'], /name the nodes with -n/);
    refused(['-n', 'a,a', 'reboot'], /node a is named twice/);
    refused(['-n', 'a'], /no talosctl command/);
    refused(['-n', 'a', 'upgrade'], /upgrade needs --image/);
    refused(['-n', 'a', 'reboot', '--mode', 'hard'], /--mode hard is not one gatehouse understands/);
    refused(['-n', 'a', 'reset', '--wipe-mode', 'user-disks'], /needs --user-disks-to-wipe/);
    refused(['-n', 'a', 'reset', '--system-labels-to-wipe', 'META'], /SystemData; name both/);
    refused(['-n', 'a', 'apply-config', '-f', 'c.yaml'], /needs --mode/);
    refused(['-n', 'a', 'apply-config', '-f', 'c.yaml', '--mode', 'auto'], /needs --mode/);
    refused(['-n', 'a', 'apply-config', '--insecure', '-f', 'c', '-m', 'reboot'], /maintenance mode/);
    refused(['-n', 'a', 'reboot', '--wait=maybe'], /true or false/);
    refused(['-n', 'a', 'upgrade', '--image'], /--image needs a value/);
    refused(['-n'], /needs a node/);
  });
});
