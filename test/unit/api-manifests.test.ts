// The install set (`gatehouse manifests`) and deploy/ (scripts/generate.ts) come from
// one source, are deterministic, and say what DESIGN.md and issue 3 require of RBAC,
// the admission policy and the controller's pod.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { appendFile, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { KINDS } from '../../src/api/kinds.ts';
import { controllerUsername } from '../../src/manifests/admission-policy.ts';
import {
  DEFAULT_INSTALL,
  deployFiles,
  installSet,
  renderYaml,
  type ManifestObject,
} from '../../src/manifests/install-set.ts';

const run = promisify(execFile);
const root = join(import.meta.dirname, '..', '..');

interface Obj {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [key: string]: unknown;
}
type Rule = { apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] };

const objects = installSet({
  namespace: 'ops',
  image: 'registry.example.com/gatehouse:1.2.3',
}) as unknown as Obj[];
const find = (kind: string, name?: string): Obj => {
  const found = objects.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  if (!found) throw new Error(`no ${kind} ${name ?? ''} in the install set`);
  return found;
};
const rulesOf = (name: string) => find('ClusterRole', name).rules as Rule[];

/** Runs a script with the Node that runs the tests; resolves with its exit code and output. */
async function node(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, args, { cwd: root, maxBuffer: 64 * 1024 * 1024 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe('install set', () => {
  it('is deterministic', () => {
    assert.equal(renderYaml(installSet()), renderYaml(installSet()));
    assert.deepEqual([...deployFiles()], [...deployFiles()]);
  });

  it('comes in apply order: Namespace, CRDs, RBAC, admission policy, ServiceAccount, Deployment', () => {
    const kinds = objects.map((o) => o.kind);
    assert.equal(kinds[0], 'Namespace');
    assert.deepEqual(
      kinds.slice(1, 1 + KINDS.length),
      KINDS.map(() => 'CustomResourceDefinition'),
    );
    const last = (kind: string) => kinds.lastIndexOf(kind);
    const first = (kind: string) => kinds.indexOf(kind);
    assert.ok(last('CustomResourceDefinition') < first('ClusterRole'));
    assert.ok(last('RoleBinding') < first('ValidatingAdmissionPolicy'));
    assert.ok(last('ValidatingAdmissionPolicyBinding') < first('ServiceAccount'));
    assert.equal(kinds.at(-1), 'Deployment');
  });

  it('has the finalizer policy only when asked (an API server must serve it), in its own deploy/ file', () => {
    const kinds = (o: ManifestObject[]) => o.map((x) => x.kind);
    assert.ok(!kinds(installSet()).includes('MutatingAdmissionPolicy'));
    const withPolicy = kinds(installSet({ ...DEFAULT_INSTALL, finalizerPolicy: true }));
    assert.ok(
      withPolicy.indexOf('MutatingAdmissionPolicyBinding') < withPolicy.indexOf('ServiceAccount'),
      'before the controller',
    );
    assert.match(deployFiles().get('finalizer-policy.yaml') ?? '', /kind: MutatingAdmissionPolicy\n/);
    assert.doesNotMatch(deployFiles().get('admission-policy.yaml') ?? '', /MutatingAdmissionPolicy/);
  });

  it('puts every namespaced object, binding subject and the policy exemption in the chosen namespace', () => {
    for (const o of objects.filter((x) =>
      ['ServiceAccount', 'Role', 'RoleBinding', 'Deployment', 'Service'].includes(x.kind),
    )) {
      assert.equal(o.metadata.namespace, 'ops', `${o.kind} ${o.metadata.name}`);
    }
    for (const binding of objects.filter(
      (x) => x.kind.endsWith('Binding') && x.kind !== 'ValidatingAdmissionPolicyBinding',
    )) {
      assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'gatehouse', namespace: 'ops' }]);
    }
    const policy = JSON.stringify(find('ValidatingAdmissionPolicy'));
    assert.ok(policy.includes(`'${controllerUsername('ops')}'`));
    assert.equal(controllerUsername('ops'), 'system:serviceaccount:ops:gatehouse');
    assert.ok(!JSON.stringify(objects).includes(DEFAULT_INSTALL.namespace));
  });

  it('refuses a namespace that is not a DNS label and an empty image', () => {
    assert.throws(
      () => installSet({ namespace: 'Ops_1', image: 'x' }),
      /namespace "Ops_1" must be a DNS label/,
    );
    assert.throws(() => installSet({ namespace: 'ops', image: ' ' }), /image must not be empty/);
  });

  it('runs the controller hardened, with probes, resources and a writable /tmp', () => {
    const deployment = find('Deployment') as unknown as {
      spec: {
        template: {
          spec: Record<string, unknown> & { containers: Record<string, unknown>[]; volumes: unknown[] };
        };
      };
    };
    const pod = deployment.spec.template.spec;
    assert.equal(pod.serviceAccountName, 'gatehouse');
    assert.deepEqual(pod.securityContext, {
      runAsNonRoot: true,
      runAsUser: 65532,
      runAsGroup: 65532,
      fsGroup: 65532,
      seccompProfile: { type: 'RuntimeDefault' },
    });
    const [container] = pod.containers;
    assert.ok(container);
    assert.equal(container.image, 'registry.example.com/gatehouse:1.2.3');
    assert.deepEqual(container.args, ['controller']);
    assert.deepEqual(container.securityContext, {
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    });
    assert.deepEqual(container.ports, [{ name: 'http', containerPort: 8080, protocol: 'TCP' }]);
    assert.deepEqual((container.livenessProbe as { httpGet: unknown }).httpGet, {
      path: '/healthz',
      port: 'http',
    });
    assert.deepEqual((container.readinessProbe as { httpGet: unknown }).httpGet, {
      path: '/readyz',
      port: 'http',
    });
    const resources = container.resources as {
      requests: Record<string, string>;
      limits: Record<string, string>;
    };
    assert.ok(
      resources.requests.cpu && resources.requests.memory && resources.limits.cpu && resources.limits.memory,
    );
    assert.deepEqual((container.volumeMounts as unknown[])[0], { name: 'tmp', mountPath: '/tmp' });
    assert.deepEqual(pod.volumes[0], { name: 'tmp', emptyDir: { sizeLimit: '64Mi' } });
    // The controller lifts the preready taint, so it must be able to run where it is set.
    assert.ok(JSON.stringify(pod.tolerations).includes('talos.dev/preready'));
  });
});

describe('RBAC', () => {
  it('grants the controller what DESIGN.md needs, and no wildcard, cluster-wide Secret or escalation', () => {
    const rules = rulesOf('gatehouse:controller');
    const allows = (group: string, resource: string, verb: string) =>
      rules.some(
        (r) => r.apiGroups.includes(group) && r.resources.includes(resource) && r.verbs.includes(verb),
      );
    for (const [group, resource, verb] of [
      ['talos.dev', 'nodeactions', 'watch'],
      ['talos.dev', 'nodeactions/status', 'patch'],
      ['talos.dev', 'clusterhealthchecks/status', 'update'],
      ['talos.dev', 'prerebootjobs', 'list'],
      ['batch', 'jobs', 'create'],
      ['batch', 'jobs', 'delete'],
      ['', 'nodes', 'patch'],
      ['', 'pods/eviction', 'create'],
      ['events.k8s.io', 'events', 'create'],
      ['authentication.k8s.io', 'tokenreviews', 'create'],
      ['authorization.k8s.io', 'subjectaccessreviews', 'create'],
    ] as const) {
      assert.ok(allows(group, resource, verb), `controller may not ${verb} ${resource}.${group}`);
    }
    for (const r of rules) {
      assert.ok(
        !r.verbs.includes('*') && !r.resources.includes('*') && !r.apiGroups.includes('*'),
        JSON.stringify(r),
      );
      assert.ok(!r.resources.includes('secrets'), 'no cluster-wide Secret access');
      for (const verb of ['escalate', 'bind', 'impersonate', 'bypass'])
        assert.ok(!r.verbs.includes(verb), verb);
    }
    assert.ok(!allows('talos.dev', 'prerebootjobs', 'create'), 'the controller never writes hooks');
    const role = find('Role', 'gatehouse:controller');
    assert.deepEqual(
      (role.rules as Rule[]).filter((r) => r.resourceNames).map((r) => r.resourceNames),
      [['gatehouse-controller', 'gatehouse-turn'], ['gatehouse-turn']],
      'its leader Lease, and the turn the controller instances take (watched by name)',
    );
  });

  it('aggregates hook editing into edit and admin (like Jobs) and reading into view', () => {
    const edit = find('ClusterRole', 'gatehouse:edit');
    const labels = edit.metadata.labels ?? {};
    assert.equal(labels['rbac.authorization.k8s.io/aggregate-to-edit'], 'true');
    assert.equal(labels['rbac.authorization.k8s.io/aggregate-to-admin'], 'true');
    const [rule] = rulesOf('gatehouse:edit');
    assert.ok(rule);
    assert.deepEqual([...rule.resources].sort(), [
      'nodeprereadyjobs',
      'nodereadyjobs',
      'premaintenancejobs',
      'prerebootjobs',
      'preresetjobs',
      'preshutdownjobs',
      'preupgradejobs',
    ]);
    assert.ok(rule.verbs.includes('create') && rule.verbs.includes('delete'));
    const view = find('ClusterRole', 'gatehouse:view');
    assert.equal(view.metadata.labels?.['rbac.authorization.k8s.io/aggregate-to-view'], 'true');
    assert.deepEqual(rulesOf('gatehouse:view')[0]?.verbs, ['get', 'list', 'watch']);
  });

  it('grants bypass, and nothing else, through gatehouse:bypass', () => {
    assert.deepEqual(rulesOf('gatehouse:bypass'), [
      { apiGroups: ['talos.dev'], resources: ['nodeactions'], verbs: ['bypass'] },
    ]);
  });
});

describe('scripts/generate.ts', () => {
  it('finds the committed deploy/ up to date', async () => {
    const { code, stderr } = await node('scripts/generate.ts', '--check');
    assert.equal(code, 0, stderr);
  });

  it('fails --check on a changed, missing or stale file, naming it', async (t) => {
    const out = await mkdtemp(join(tmpdir(), 'gatehouse-deploy-'));
    t.after(() => rm(out, { recursive: true, force: true }));
    assert.equal((await node('scripts/generate.ts', '--out', out)).code, 0);
    assert.equal((await node('scripts/generate.ts', '--check', '--out', out)).code, 0);

    await appendFile(join(out, 'rbac.yaml'), '# hand edit\n');
    await writeFile(join(out, 'crds', 'talos.dev_oldthings.yaml'), 'kind: CustomResourceDefinition\n');
    await rm(join(out, 'admission-policy.yaml'));
    const drift = await node('scripts/generate.ts', '--check', '--out', out);
    assert.equal(drift.code, 1);
    assert.match(drift.stderr, /differs from a fresh generation: .*rbac\.yaml/);
    assert.match(drift.stderr, /differs from a fresh generation: .*admission-policy\.yaml/);
    assert.match(drift.stderr, /not generated any more: .*talos\.dev_oldthings\.yaml/);
    assert.match(drift.stderr, /run: npm run generate/);

    assert.equal((await node('scripts/generate.ts', '--out', out)).code, 0);
    assert.equal((await node('scripts/generate.ts', '--check', '--out', out)).code, 0);
  });
});

describe('gatehouse manifests', () => {
  it('prints the install set for the namespace and image asked for', async () => {
    const { code, stdout, stderr } = await node(
      'src/cli/main.ts',
      'manifests',
      '--namespace',
      'ops',
      '--image',
      'registry.example.com/gatehouse:1.2.3',
    );
    assert.equal(code, 0, stderr);
    const printed = parseAllDocuments(stdout).map((d) => d.toJS() as Obj);
    assert.deepEqual(printed, objects);
  });

  it('refuses a bad namespace with a message that says what is allowed', async () => {
    const { code, stderr } = await node('src/cli/main.ts', 'manifests', '--namespace', 'Not_OK');
    assert.equal(code, 2, 'a usage error (see src/cli/exit.ts)');
    assert.match(stderr, /--namespace .*must be a DNS label/);
  });
});
