// A suite's teardown after a setup that failed half-way (test/support/teardown.ts).
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { stopAll } from '../support/teardown.ts';

it('stops what was started, skips what was not, and goes on past a failing stop', async () => {
  const stopped: string[] = [];
  const part = (name: string, fails = false) => ({
    stop: () => {
      stopped.push(name);
      return fails ? Promise.reject(new Error(`${name} failed`)) : Promise.resolve();
    },
  });
  await assert.rejects(
    stopAll(undefined, part('controller', true), undefined, part('sandbox')),
    /controller failed/,
  );
  assert.deepEqual(stopped, ['controller', 'sandbox']);
  await stopAll(undefined, undefined);
});
