// helm, as sandbox/build.sh built it, and the chart rendered by it.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { findHelm } from '../../sandbox/binaries.ts';
import type { Manifest } from '../../src/kube/apply.ts';
import { repoRoot } from './install.ts';

const run = promisify(execFile);
export const chart = `${repoRoot}/charts/gatehouse`;

export async function helm(...args: string[]): Promise<string> {
  const binary = await findHelm();
  if (!binary)
    throw new Error('helm is not built: run bash sandbox/build.sh (it builds helm from its Go module)');
  const { stdout } = await run(binary, args, {
    env: { ...process.env, HELM_CACHE_HOME: '/tmp/gatehouse-helm-cache' },
  });
  return stdout;
}

/** `helm template` of the chart with `--set` for each of `set`, as objects. */
export async function renderChart(...set: string[]): Promise<Manifest[]> {
  const rendered = await helm('template', 'gh', chart, ...set.flatMap((s) => ['--set', s]));
  return parseAllDocuments(rendered)
    .map((d) => d.toJS() as Manifest | null)
    .filter((o): o is Manifest => o !== null);
}
