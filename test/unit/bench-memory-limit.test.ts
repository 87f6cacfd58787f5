// The scale benchmark runs each controller under its Deployment's memory limit: the limit
// reaches the process (Node sizes its heap from it), or the benchmark says why it could not.
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { quantityBytes, spawnLimited } from '../../bench/memory-limit.ts';

it('reads the byte quantities a memory limit is written in', () => {
  assert.equal(quantityBytes('512Mi'), 512 * 2 ** 20);
  assert.equal(quantityBytes('1Gi'), 2 ** 30);
  assert.equal(quantityBytes('64Ki'), 65_536);
  assert.equal(quantityBytes('1000'), 1000);
  assert.throws(() => quantityBytes('512M'), /not a quantity of bytes/);
});

async function constrainedMemory(limit: string | undefined): Promise<{ seen: number; confinement: string }> {
  const limited = await spawnLimited(
    process.execPath,
    ['-e', 'process.stdout.write(String(process.constrainedMemory()))'],
    { stdio: ['ignore', 'pipe', 'inherit'] },
    limit,
  );
  let out = '';
  const stdout = limited.child.stdout;
  stdout?.on('data', (d: Buffer) => (out += d.toString()));
  await new Promise((resolve) => stdout?.once('close', resolve));
  await limited.release();
  return { seen: Number(out), confinement: limited.confinement };
}

it('runs the process under the limit, or says why not', async () => {
  const { seen, confinement } = await constrainedMemory('384Mi');
  if (confinement === 'a 384Mi memory cgroup') assert.equal(seen, 384 * 2 ** 20);
  else assert.match(confinement, /^no memory limit: /);
});

it('runs it unconfined when asked for no limit', async () => {
  const { confinement } = await constrainedMemory(undefined);
  assert.equal(confinement, 'no memory limit (asked for none)');
});
