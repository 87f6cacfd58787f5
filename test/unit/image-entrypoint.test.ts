// The controller's Node flags that NODE_OPTIONS may not carry reach it through the image's
// entrypoint, in both ways the image is built (the Dockerfile, scripts/image.sh).
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { it } from 'node:test';
import { CONTROLLER_NODE_FLAGS } from '../../src/manifests/controller.ts';

it('the Dockerfile and scripts/image.sh pass CONTROLLER_NODE_FLAGS before the CLI', async () => {
  const dockerfile = await readFile('Dockerfile', 'utf8');
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)?.[1];
  assert.deepEqual(JSON.parse(entrypoint ?? '[]'), [
    '/usr/local/bin/node',
    ...CONTROLLER_NODE_FLAGS,
    '/app/dist/src/cli/main.js',
  ]);
  const script = (await readFile('scripts/image.sh', 'utf8')).replace(/\\\n\s*/g, '');
  const parts = [...script.matchAll(/--config\.entrypoint (\S+)/g)].map((m) => m[1]);
  assert.deepEqual(parts, ['/usr/local/bin/node', ...CONTROLLER_NODE_FLAGS, '/app/dist/src/cli/main.js']);
});
