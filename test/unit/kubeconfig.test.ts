// The controller's own kubeconfig reading (src/kube/kubeconfig.ts): certificates and
// tokens, inline or in files (read again as they rotate), the in-cluster ServiceAccount,
// and everything else handed to client-node.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { inlineKubeconfig, loadCredentials, plainKubeconfig } from '../../src/kube/kubeconfig.ts';

let dir = '';
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'gatehouse-kubeconfig-'));
});
after(() => rm(dir, { recursive: true, force: true }));

const b64 = (s: string) => Buffer.from(s).toString('base64');

function kubeconfig(cluster: Record<string, unknown>, user: Record<string, unknown>, extra = {}) {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    'current-context': 'main',
    contexts: [
      { name: 'main', context: { cluster: 'c', user: 'u' } },
      { name: 'other', context: { cluster: 'c2', user: 'u' } },
    ],
    clusters: [
      { name: 'c', cluster },
      { name: 'c2', cluster: { server: 'https://other.example:6443' } },
    ],
    users: [{ name: 'u', user }],
    ...extra,
  });
}

async function applied(options: Parameters<typeof loadCredentials>[0]) {
  const credentials = await loadCredentials({ env: {}, ...options });
  const request: RequestOptions = {};
  await credentials.applyToHTTPSOptions(request);
  return { credentials, request };
}

describe('the controller’s kubeconfig', () => {
  it('reads inline certificates, the server and TLS settings of the current context', async () => {
    const path = join(dir, 'inline');
    await writeFile(
      path,
      kubeconfig(
        {
          server: 'https://api.example:6443',
          'certificate-authority-data': b64('CA'),
          'tls-server-name': 'kubernetes',
        },
        { 'client-certificate-data': b64('CERT'), 'client-key-data': b64('KEY') },
      ),
    );
    const { credentials, request } = await applied({ kubeconfig: path });
    assert.equal(credentials.getCurrentCluster()?.server, 'https://api.example:6443');
    assert.equal((request.ca as Buffer).toString(), 'CA');
    assert.equal((request.cert as Buffer).toString(), 'CERT');
    assert.equal((request.key as Buffer).toString(), 'KEY');
    assert.equal(request.servername, 'kubernetes');
    assert.equal(request.rejectUnauthorized, undefined);
    assert.equal(request.headers, undefined);
  });

  it('reads files relative to the kubeconfig, and a bearer token', async () => {
    await writeFile(join(dir, 'ca.crt'), 'FILE-CA');
    await writeFile(join(dir, 'token'), 'secret-token\n');
    const path = join(dir, 'files');
    await writeFile(
      path,
      kubeconfig(
        {
          server: 'https://api.example',
          'certificate-authority': 'ca.crt',
          'insecure-skip-tls-verify': true,
        },
        { tokenFile: 'token' },
      ),
    );
    const { request } = await applied({ kubeconfig: path });
    assert.equal((request.ca as Buffer).toString(), 'FILE-CA');
    assert.equal(request.rejectUnauthorized, false);
    assert.deepEqual(request.headers, { Authorization: 'Bearer secret-token' });
  });

  it('uses the context asked for, and $KUBECONFIG when no file is named', async () => {
    const path = join(dir, 'env');
    await writeFile(path, kubeconfig({ server: 'https://api.example' }, { token: 't' }));
    const { credentials } = await applied({ env: { KUBECONFIG: path }, context: 'other' });
    assert.equal(credentials.getCurrentCluster()?.server, 'https://other.example:6443');
  });

  it('reads the in-cluster ServiceAccount, and its token again once it rotates', async (t) => {
    t.mock.timers.enable({ apis: ['Date'] });
    const sa = join(dir, 'sa');
    await mkdir(sa);
    await writeFile(join(sa, 'ca.crt'), 'SA-CA');
    await writeFile(join(sa, 'token'), 'first');
    const credentials = await loadCredentials({
      env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443', HOME: dir },
      serviceAccountDir: sa,
    });
    assert.equal(credentials.getCurrentCluster()?.server, 'https://[fd00::1]:443');
    const token = async () => {
      const request: RequestOptions = {};
      await credentials.applyToHTTPSOptions(request);
      return (request.headers as Record<string, string> | undefined)?.Authorization;
    };
    assert.equal(await token(), 'Bearer first');
    await writeFile(join(sa, 'token'), 'second');
    assert.equal(await token(), 'Bearer first', 'read at most once a minute');
    t.mock.timers.tick(61_000);
    assert.equal(await token(), 'Bearer second');
  });

  it('leaves exec plugins, basic auth and proxies to client-node', async () => {
    for (const [cluster, user] of [
      [
        { server: 'https://api.example' },
        { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: 'x' } },
      ],
      [{ server: 'https://api.example' }, { username: 'a', password: 'b' }],
      [{ server: 'https://api.example', 'proxy-url': 'http://proxy:3128' }, { token: 't' }],
    ] as const) {
      const text = kubeconfig(cluster, user);
      assert.equal(plainKubeconfig(text, '/k'), undefined, JSON.stringify({ cluster, user }));
      const path = join(dir, 'fallback');
      await writeFile(path, text);
      assert.ok((await loadCredentials({ kubeconfig: path, env: {} })) instanceof KubeConfig);
    }
  });
});

describe('inlineKubeconfig (a kubeconfig from a Secret)', () => {
  const config = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}) =>
    stringify({
      apiVersion: 'v1',
      'current-context': 'c',
      clusters: [{ name: 'mgmt', cluster: { server: 'https://10.0.0.1:6443', ...cluster } }],
      users: [{ name: 'u', user }],
      contexts: [{ name: 'c', context: { cluster: 'mgmt', user: 'u' } }],
    });

  it('reads a token and an inline CA, and names the current cluster', async () => {
    const read = inlineKubeconfig(config({ token: 'abc' }, { 'certificate-authority-data': b64('CA') }));
    assert.equal(read.clusterName, 'mgmt');
    const options: RequestOptions = {};
    await read.credentials.applyToHTTPSOptions(options);
    assert.equal(String(options.ca), 'CA');
    assert.deepEqual(options.headers, { Authorization: 'Bearer abc' });
  });

  it('refuses files and plugins, and never quotes the text', () => {
    assert.throws(() => inlineKubeconfig(config({ tokenFile: '/var/run/secrets/token' })), /refers to files/);
    assert.throws(
      () => inlineKubeconfig(config({ token: 't' }, { 'certificate-authority': '/ca' })),
      /refers to files/,
    );
    assert.throws(
      () => inlineKubeconfig(config({ exec: { command: 'sh' } })),
      /is not a kubeconfig gatehouse reads/,
    );
    for (const text of ['secret-value-123', 'a: [unclosed secret-value-123', 'password: secret-value-123']) {
      assert.throws(
        () => inlineKubeconfig(text),
        (error: Error) =>
          /is not a kubeconfig/.test(error.message) && !error.message.includes('secret-value'),
      );
    }
  });
});
