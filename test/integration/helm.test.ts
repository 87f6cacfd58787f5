// The Helm chart: lint clean, render, and the rendered manifests apply to the sandbox.
// helm is built from its Go module by sandbox/build.sh (as the control plane is).
import assert from 'node:assert/strict';
import { KINDS } from '../../src/api/kinds.ts';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import type { Manifest } from '../../src/kube/apply.ts';
import { chart, helm, renderChart } from '../support/helm.ts';
import { rest, serverSideApply, testKubeConfig } from '../support/kube.ts';

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

  it('serves the dashboard unless dashboard.enabled is false; turns the Cluster API mode on with a Secret and a Cluster', async () => {
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
    assert.deepEqual(
      await args(
        '--set',
        'clusterAPI.kubeconfigSecret=mgmt-kubeconfig',
        '--set',
        'clusterAPI.cluster=default/workload',
      ),
      [
        'controller',
        '--log-level=info',
        '--cluster-api-kubeconfig-secret=mgmt-kubeconfig',
        '--cluster-api-kubeconfig-key=value',
        '--cluster-api-cluster=default/workload',
      ],
    );
    await assert.rejects(args('--set', 'clusterAPI.kubeconfigSecret=mgmt-kubeconfig'), /clusterAPI.cluster/);
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
    assert.equal(kinds.filter((k) => k === 'CustomResourceDefinition').length, KINDS.length);
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

  it('renders the observability objects only when asked, and the budget unless told not to', async () => {
    const kinds = (objects: Manifest[]) =>
      objects.map((o) => o.kind).filter((k) => k !== 'CustomResourceDefinition');
    const plain = kinds(await renderChart());
    for (const kind of ['ServiceMonitor', 'PrometheusRule', 'ConfigMap', 'NetworkPolicy'])
      assert.ok(!plain.includes(kind), `no ${kind} by default`);
    assert.ok(plain.includes('PodDisruptionBudget'), 'a PodDisruptionBudget by default');
    assert.ok(!kinds(await renderChart('podDisruptionBudget.enabled=false')).includes('PodDisruptionBudget'));

    const objects = await renderChart(
      'metrics.serviceMonitor.enabled=true',
      'metrics.serviceMonitor.labels.release=kube-prometheus-stack',
      'prometheusRule.enabled=true',
      'grafanaDashboard.enabled=true',
      'networkPolicy.enabled=true',
      'networkPolicy.ingressFrom[0].namespaceSelector.matchLabels.name=monitoring',
      'podDisruptionBudget.maxUnavailable=2',
    );
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters -- the caller names the shape it reads
    const find = <T>(kind: string) => objects.find((o) => o.kind === kind) as unknown as T;
    const monitor = find<{
      metadata: { labels: Record<string, string> };
      spec: { endpoints: { port: string; path: string }[] };
    }>('ServiceMonitor');
    assert.equal(monitor.metadata.labels.release, 'kube-prometheus-stack');
    assert.deepEqual(
      monitor.spec.endpoints.map((e) => [e.port, e.path]),
      [['http', '/metrics']],
    );
    const rule = find<{ spec: { groups: { rules: { alert: string }[] }[] } }>('PrometheusRule');
    assert.deepEqual(
      rule.spec.groups.flatMap((g) => g.rules.map((r) => r.alert)),
      [
        'GatehouseCheckUnhealthy',
        'GatehouseRebootHeld',
        'GatehouseActionStuck',
        'GatehouseHookFailed',
        'GatehouseNotReady',
        'GatehouseUnplannedDisruption',
        'GatehouseLeaderless',
      ],
    );
    const dashboard = find<{ metadata: { labels: Record<string, string> }; data: Record<string, string> }>(
      'ConfigMap',
    );
    assert.equal(dashboard.metadata.labels.grafana_dashboard, '1');
    const json = JSON.parse(dashboard.data['gatehouse.json'] ?? '') as {
      uid: string;
      panels: { targets: { expr: string }[] }[];
    };
    assert.equal(json.uid, 'gatehouse');
    assert.ok(json.panels.length >= 8);
    const policy = find<{
      spec: { policyTypes: string[]; ingress: { from?: unknown[]; ports: unknown[] }[] };
    }>('NetworkPolicy');
    assert.deepEqual(policy.spec.policyTypes, ['Ingress']);
    assert.deepEqual(policy.spec.ingress[0]?.from, [
      { namespaceSelector: { matchLabels: { name: 'monitoring' } } },
    ]);
    assert.equal(find<{ spec: { maxUnavailable: number } }>('PodDisruptionBudget').spec.maxUnavailable, 2);
  });

  it('sets priorityClassName, topology spread, extra arguments and environment on the controller pods', async () => {
    type Pod = {
      priorityClassName?: string;
      topologySpreadConstraints?: Record<string, unknown>[];
      containers: { args: string[]; env: { name: string; value?: string }[] }[];
    };
    const pod = async (...set: string[]) =>
      (
        (await renderChart(...set)).find((o) => o.kind === 'Deployment') as unknown as {
          spec: { template: { spec: Pod } };
        }
      ).spec.template.spec;
    const plain = await pod();
    assert.equal(plain.priorityClassName, undefined);
    assert.equal(plain.topologySpreadConstraints, undefined);
    assert.deepEqual(
      plain.containers[0]?.env.map((e) => e.name),
      ['POD_NAMESPACE', 'POD_NAME', 'NODE_OPTIONS', 'MALLOC_ARENA_MAX'],
    );

    const set = await pod(
      'priorityClassName=system-cluster-critical',
      'topologySpreadConstraints[0].maxSkew=1',
      'topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone',
      'topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway',
      'extraArgs[0]=--talos-timeout=30s',
      'extraEnv[0].name=HTTPS_PROXY',
      'extraEnv[0].value=http://proxy:3128',
    );
    assert.equal(set.priorityClassName, 'system-cluster-critical');
    assert.deepEqual(set.topologySpreadConstraints, [
      {
        maxSkew: 1,
        topologyKey: 'topology.kubernetes.io/zone',
        whenUnsatisfiable: 'ScheduleAnyway',
        // The controller's pods, unless the constraint says otherwise.
        labelSelector: {
          matchLabels: { 'app.kubernetes.io/name': 'gatehouse', 'app.kubernetes.io/component': 'controller' },
        },
      },
    ]);
    assert.deepEqual(set.containers[0]?.args, ['controller', '--log-level=info', '--talos-timeout=30s']);
    assert.deepEqual(set.containers[0].env.at(-1), { name: 'HTTPS_PROXY', value: 'http://proxy:3128' });
    await assert.rejects(renderChart('prometheusRule.checkUnhealthyFor=soon'), /checkUnhealthyFor/);
  });
  it('renders the Talos API gate (Deployment and Service) only when talosGate.enabled', async () => {
    const named = (objects: Manifest[]) => objects.filter((o) => o.metadata?.name === 'gatehouse-talos-gate');
    assert.deepEqual(named(await renderChart()), []);
    const gate = named(
      await renderChart(
        'talosGate.enabled=true',
        'talosGate.replicaCount=3',
        'talosGate.extraNames={gate.example.com}',
      ),
    );
    assert.deepEqual(gate.map((o) => o.kind).sort(), ['Deployment', 'Service']);
    const deployment = gate.find((o) => o.kind === 'Deployment') as unknown as {
      spec: { replicas: number; template: { spec: { containers: { args: string[] }[] } } };
    };
    assert.equal(deployment.spec.replicas, 3);
    const args = deployment.spec.template.spec.containers[0]?.args ?? [];
    assert.ok(
      args.includes('talos-gate') &&
        args.includes('--name=gate.example.com') &&
        args.includes('--hold=1500ms'),
      args.join(' '),
    );
    await assert.rejects(renderChart('talosGate.enabled=true', 'talosGate.hold=soon'), /hold/);
  });
});
