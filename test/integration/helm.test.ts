// The Helm chart: lint clean, render, and the rendered manifests apply to the sandbox.
// helm is built from its Go module by sandbox/build.sh (as the control plane is).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { findHelm } from '../../sandbox/binaries.ts';
import type { Manifest } from '../../src/kube/apply.ts';
import { repoRoot } from '../support/install.ts';
import { rest, serverSideApply, testKubeConfig } from '../support/kube.ts';

const run = promisify(execFile);
const chart = `${repoRoot}/charts/gatehouse`;

async function helm(...args: string[]): Promise<string> {
  const binary = await findHelm();
  if (!binary)
    throw new Error('helm is not built: run bash sandbox/build.sh (it builds helm from its Go module)');
  const { stdout } = await run(binary, args, {
    env: { ...process.env, HELM_CACHE_HOME: '/tmp/gatehouse-helm-cache' },
  });
  return stdout;
}

describe('Helm chart', () => {
  it('passes helm lint, strictly', async () => {
    const out = await helm('lint', '--strict', chart);
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  it('refuses values that break its schema', async () => {
    await assert.rejects(helm('template', 'gh', chart, '--set', 'replicaCount=0'), /replicaCount/);
    await assert.rejects(helm('template', 'gh', chart, '--set', 'image.pullPolicy=Sometimes'), /pullPolicy/);
    await assert.rejects(helm('template', 'gh', chart, '--set', 'dashboard.enabled=maybe'), /dashboard/);
  });

  it('serves the dashboard unless dashboard.enabled is false', async () => {
    const args = async (...set: string[]) => {
      const rendered = await helm('template', 'gh', chart, ...set);
      const deployment = parseAllDocuments(rendered)
        .map((d) => d.toJS() as (Manifest & { spec?: unknown }) | null)
        .find((o) => o?.kind === 'Deployment') as
        { spec: { template: { spec: { containers: { args: string[] }[] } } } } | undefined;
      return deployment?.spec.template.spec.containers[0]?.args;
    };
    assert.deepEqual(await args(), ['controller', '--log-level=info']);
    assert.deepEqual(await args('--set', 'dashboard.enabled=false'), [
      'controller',
      '--log-level=info',
      '--no-dashboard',
    ]);
  });

  it('adds the finalizer policy only where the API server serves MutatingAdmissionPolicy', async () => {
    const kinds = async (...extra: string[]) =>
      parseAllDocuments(await helm('template', 'gh', chart, ...extra)).map(
        (d) => (d.toJS() as Manifest | null)?.kind,
      );
    const policy = ['MutatingAdmissionPolicy', 'MutatingAdmissionPolicyBinding'];
    for (const kind of policy) assert.ok(!(await kinds()).includes(kind), `no ${kind} for an older cluster`);
    const served = await kinds('--api-versions', 'admissionregistration.k8s.io/v1/MutatingAdmissionPolicy');
    for (const kind of policy) assert.ok(served.includes(kind), `a ${kind} where it is served`);
  });

  it('renders manifests that apply to the sandbox', async () => {
    // The release namespace the shipped manifests use, so the cluster-scoped objects the
    // other suites rely on (the admission policy's exemption) stay as they are.
    const rendered = await helm(
      'template', 'gatehouse', chart, '--namespace', 'gatehouse-system',
      '--set', 'image.repository=registry.example/gatehouse', '--set', 'image.tag=1.2.3', '--set', 'replicaCount=3',
    ); // prettier-ignore
    const objects = parseAllDocuments(rendered)
      .map((d) => d.toJS() as Manifest | null)
      .filter((o): o is Manifest => o !== null);
    const kinds = objects.map((o) => o.kind);
    assert.equal(kinds.filter((k) => k === 'CustomResourceDefinition').length, 9);
    for (const kind of [
      'ClusterRole',
      'ValidatingAdmissionPolicy',
      'ValidatingAdmissionPolicyBinding',
      'ServiceAccount',
      'Deployment',
    ]) {
      assert.ok(kinds.includes(kind), `renders a ${kind}`);
    }
    assert.ok(
      !kinds.includes('Namespace'),
      'the release namespace is helm install --create-namespace, not the chart',
    );
    const deployment = objects.find((o) => o.kind === 'Deployment') as Manifest & {
      spec: { replicas: number; template: { spec: { containers: { image: string; resources: unknown }[] } } };
    };
    assert.equal(deployment.spec.replicas, 3);
    assert.equal(deployment.spec.template.spec.containers[0]?.image, 'registry.example/gatehouse:1.2.3');
    assert.deepEqual(deployment.spec.template.spec.containers[0].resources, {
      limits: { cpu: '1', memory: '512Mi' },
      requests: { cpu: '50m', memory: '128Mi' },
    });
    const crd = objects.find((o) => o.kind === 'CustomResourceDefinition') as Manifest & {
      metadata: { annotations?: Record<string, string> };
    };
    assert.equal(crd.metadata.annotations?.['helm.sh/resource-policy'], 'keep');
    const kc = testKubeConfig();
    // What `helm install --create-namespace` does first (other suites may have made it).
    await serverSideApply(
      kc,
      [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'gatehouse-system' } }],
      'gatehouse-helm-test',
    );
    const applied = await serverSideApply(kc, objects, 'gatehouse-helm-test');
    assert.equal(applied.length, objects.length);
    // No controller image runs here, and its simulated pods would only get in the way of
    // drains in other suites: the Deployment goes again.
    await rest(kc).request('/apis/apps/v1/namespaces/gatehouse-system/deployments/gatehouse-controller', {
      method: 'DELETE',
    });
  });
});
