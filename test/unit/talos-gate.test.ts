// The Talos API gate's pure parts: which calls it gates and how (classify.ts), who may
// make them (methods.ts), what a held caller reads (held.ts), what passes untouched
// (wire.ts: invariant 11's metadata, as a property), the certificates (pki.ts) and the
// signer's judgement of a request (signer.ts).
import assert from 'node:assert/strict';
import { createPublicKey, X509Certificate } from 'node:crypto';
import { describe, it } from 'node:test';
import { createSecureContext } from 'node:tls';
import { create, toBinary } from '@bufbuild/protobuf';
import fc from 'fast-check';
import type { ObservedNodeAction } from '../../src/api/node-action.ts';
import {
  ApplyConfigurationRequest_Mode as ApplyMode,
  ApplyConfigurationRequestSchema,
  RebootRequestSchema,
} from '../../src/talos/gen/gatehouse/talos/machine_pb.ts';
import { parseTalosVersion } from '../../src/talos/version.ts';
import { classifyCall } from '../../src/talos-gate/classify.ts';
import { heldMessage } from '../../src/talos-gate/held.ts';
import { mayCall, methodFacts, TALOS_METHODS } from '../../src/talos-gate/methods.ts';
import {
  createAuthority,
  createCertificateRequest,
  issueCertificate,
  newKey,
  readCertificateRequest,
  serialNumber,
} from '../../src/talos-gate/pki.ts';
import { callDeadline } from '../../src/talos-gate/server.ts';
import { judgeRequest, readRequestedFor } from '../../src/talos-gate/signer.ts';
import { GATE_SIGNER, REQUESTED_FOR_ANNOTATION } from '../../src/talos-gate/signing-request.ts';
import { metadataOf, NOT_FORWARDED } from '../../src/talos-gate/wire.ts';
import { appendToReply, heldEntries, narrowed } from '../../src/talos-gate/fan-out.ts';
import { RebootResponseSchema } from '../../src/talos/gen/gatehouse/talos/machine_pb.ts';
import { fromBinary } from '@bufbuild/protobuf';
import { gzipSync } from 'node:zlib';

const v113 = parseTalosVersion('v1.13.0');
const v114 = parseTalosVersion('v1.14.0');
const apply = (mode: ApplyMode, dryRun = false) =>
  toBinary(
    ApplyConfigurationRequestSchema,
    create(ApplyConfigurationRequestSchema, {
      data: new TextEncoder().encode('version: v1alpha1'),
      mode,
      dryRun,
    }),
  );
const APPLY = '/machine.MachineService/ApplyConfiguration';
const GATED = new Set(
  Object.entries(TALOS_METHODS)
    .filter(([, f]) => f.gating.gated !== false)
    .map(([p]) => p),
);

describe('what the gate gates (classify.ts)', () => {
  it('ApplyConfiguration by mode and Talos version', () => {
    const kind = (mode: ApplyMode, v = v113, dry = false) => {
      const c = classifyCall(APPLY, apply(mode, dry), v);
      return c.kind === 'gate' ? `gate ${c.ask.configChange?.mode ?? ''}` : c.kind;
    };
    assert.equal(kind(ApplyMode.NO_REBOOT), 'forward');
    assert.equal(kind(ApplyMode.TRY), 'forward');
    assert.equal(kind(ApplyMode.REBOOT), 'gate Reboot');
    assert.equal(kind(ApplyMode.AUTO), 'refuse');
    assert.equal(kind(ApplyMode.STAGED), 'forward');
    assert.equal(kind(ApplyMode.REBOOT, v113, true), 'forward', 'a dry run applies nothing');
    assert.equal(kind(ApplyMode.NO_REBOOT, v114), 'gate NoReboot');
    assert.equal(kind(ApplyMode.AUTO, v114), 'gate NoReboot');
    assert.equal(kind(ApplyMode.TRY, v114), 'gate Try');
    assert.equal(kind(ApplyMode.REBOOT, v114), 'forward', '1.14 refuses REBOOT itself');
    assert.equal(
      classifyCall(APPLY, apply(ApplyMode.NO_REBOOT), undefined).kind,
      'refuse',
      'an unknown version is not guessed',
    );
  });

  it('a FORCE reboot is a Reboot action in mode Force', () => {
    const c = classifyCall(
      '/machine.MachineService/Reboot',
      toBinary(RebootRequestSchema, create(RebootRequestSchema, { mode: 2 })),
      v113,
    );
    assert.ok(c.kind === 'gate', c.kind);
    assert.ok(c.ask.action === 'Reboot' && c.ask.reboot?.mode === 'Force' && c.call.includes('FORCE'));
  });

  it('never decodes, and so never refuses, a call it does not gate (invariant 11), whatever its bytes', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.constantFrom(...Object.keys(TALOS_METHODS).filter((p) => !GATED.has(p))),
          fc
            .stringMatching(/^\/[a-z.]{1,20}\.[A-Za-z]{1,20}\/[A-Za-z]{1,20}$/)
            .filter((p) => !(p in TALOS_METHODS)),
        ),
        fc.uint8Array({ maxLength: 64 }),
        (path, bytes) => classifyCall(path, bytes, v113).kind === 'forward',
      ),
      { seed: 20261203 },
    );
  });

  it('a malformed gated request is refused with what went wrong, never forwarded', () => {
    assert.throws(
      () => classifyCall('/machine.MachineService/Reboot', new Uint8Array([0x08]), v113),
      /Reboot request does not decode/,
    );
  });
});

describe("who may call what (Talos's own rules)", () => {
  it('a reader reads, an operator reboots, only an admin resets or calls what gatehouse does not know', () => {
    assert.equal(mayCall(['os:reader'], '/machine.MachineService/Version'), true);
    assert.equal(mayCall(['os:reader'], '/machine.MachineService/Reboot'), false);
    assert.equal(mayCall(['os:operator'], '/machine.MachineService/Reboot'), true);
    assert.equal(mayCall(['os:operator'], '/machine.MachineService/Reset'), false);
    assert.equal(mayCall(['os:operator'], '/machine.MachineService/SomethingNew'), false);
    assert.equal(mayCall(['os:admin'], '/machine.MachineService/SomethingNew'), true);
    assert.equal(methodFacts('/machine.MachineService/SomethingNew').gating.gated, false);
  });
});

describe('the metadata of a forwarded call (wire.ts)', () => {
  it('keeps every header but the pseudo-headers and the connection-specific ones, values untouched', () => {
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/),
          fc.oneof(fc.string(), fc.array(fc.string(), { minLength: 1, maxLength: 3 })),
        ),
        (headers) => {
          const out = metadataOf({ ...headers, ':path': '/x', ':authority': 'gate' });
          for (const [key, value] of Object.entries(headers)) {
            if (NOT_FORWARDED.has(key)) continue;
            assert.deepEqual(out[key], value);
          }
          assert.equal(out[':path'], undefined);
        },
      ),
      { seed: 20261203 },
    );
  });

  it("reads the caller's deadline from grpc-timeout", () => {
    assert.equal(callDeadline({ 'grpc-timeout': '5S' }, 1000), 6000);
    assert.equal(callDeadline({ 'grpc-timeout': '250m' }, 0), 250);
    assert.equal(callDeadline({}, 0), undefined);
    assert.equal(callDeadline({ 'grpc-timeout': 'soon' }, 0), undefined);
  });
});

describe('what a held caller reads (held.ts)', () => {
  const action = (status: ObservedNodeAction['status']) =>
    ({
      metadata: { name: 'talos-reboot-w1-abcd-0', uid: 'u' },
      spec: { nodeName: 'w1', action: 'Reboot' },
      status,
    }) as ObservedNodeAction;
  it('names the failing checks, the running hooks, the action and the commands', () => {
    const checks = heldMessage(
      action({
        phase: 'WaitingForHealth',
        checks: [
          { name: 'ceph', healthy: false, message: 'HEALTH_WARN' },
          { name: 'ok', healthy: true },
        ],
      }),
      'MachineService.Reboot',
      'w1',
    );
    assert.match(checks, /health check ceph \(HEALTH_WARN\) is not healthy/);
    assert.doesNotMatch(checks, /\bok\b/);
    assert.match(checks, /NodeAction talos-reboot-w1-abcd-0 \(WaitingForHealth\)/);
    assert.match(checks, /gatehouse actions describe talos-reboot-w1-abcd-0/);
    const hooks = heldMessage(
      action({
        phase: 'RunningPreHooks',
        hooks: [
          {
            kind: 'PreRebootJob',
            namespace: 'rook-ceph',
            name: 'noout',
            attempt: 1,
            phase: 'Running',
            jobName: 'noout-1',
          },
        ],
      }),
      'MachineService.Reboot',
      'w1',
    );
    assert.match(hooks, /PreRebootJob rook-ceph\/noout \(running, Job noout-1\) must finish first/);
  });
});

describe('gate certificates (pki.ts, signer.ts)', () => {
  const ca = createAuthority('test CA');
  it('issues client certificates the CA verifies, naming user, role and groups', () => {
    const key = newKey();
    const pem = issueCertificate(
      {
        subject: { commonName: 'jane', organizations: ['os:operator'], organizationalUnits: ['ops'] },
        publicKey: createPublicKey(key.privateKey),
        notAfter: new Date(Date.now() + 60_000),
        usage: 'client',
      },
      ca,
    );
    const cert = new X509Certificate(pem);
    assert.ok(cert.verify(new X509Certificate(ca.cert).publicKey));
    assert.equal(cert.subject, 'O=os:operator\nOU=ops\nCN=jane');
    assert.ok(cert.checkPrivateKey(key.privateKey));
  });

  it('gives every certificate a positive serial that OpenSSL loads, whatever the random bytes', () => {
    // A first byte of zero and a second below 0x80 made a padded INTEGER (one in 256).
    for (const first of [0x00, 0x01, 0x3f, 0x7f, 0x80, 0xff])
      for (const second of [0x00, 0x7f, 0x80]) {
        const bytes = new Uint8Array(serialNumber(Uint8Array.of(first, second, ...new Uint8Array(14))));
        assert.equal(bytes.length, 16);
        assert.ok((bytes[0] ?? 0) >= 0x40 && (bytes[0] ?? 0) < 0x80, `first byte ${String(bytes[0])}`);
      }
    const key = createPublicKey(newKey().privateKey);
    for (let i = 0; i < 1000; i++) {
      const pem = issueCertificate(
        {
          subject: { commonName: `n${String(i)}` },
          publicKey: key,
          notAfter: new Date(Date.now() + 60_000),
          usage: 'client',
        },
        ca,
      );
      assert.doesNotThrow(() => createSecureContext({ cert: pem }), `certificate ${String(i)} loads`);
    }
  });

  it('reads a certificate request only when its signature verifies', () => {
    const key = newKey();
    const pem = createCertificateRequest(
      { commonName: 'jane', organizations: ['os:reader'] },
      key.privateKey,
    );
    assert.equal(readCertificateRequest(pem).subject.commonName, 'jane');
    const der = Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
    der[der.length - 1] = (der[der.length - 1] ?? 0) ^ 1;
    const tampered = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----\n`;
    assert.throws(() => readCertificateRequest(tampered), /does not verify/);
  });

  it('signs only for its requester, one known role, for no longer than allowed', () => {
    const key = newKey();
    const csr = (cn: string, roles: string[], username = 'jane', expirationSeconds = 86_400) => ({
      metadata: { name: 'x' },
      spec: {
        signerName: GATE_SIGNER,
        username,
        groups: ['ops'],
        expirationSeconds,
        request: Buffer.from(
          createCertificateRequest({ commonName: cn, organizations: roles }, key.privateKey),
        ).toString('base64'),
      },
    });
    const ok = judgeRequest(csr('jane', ['os:operator']), 3_600_000);
    assert.ok(ok.kind === 'check', ok.kind);
    assert.ok(ok.role === 'os:operator' && ok.lifetimeMs === 3_600_000 && ok.caller.groups[0] === 'ops');
    assert.match((judgeRequest(csr('bob', ['os:admin']), 1) as { message: string }).message, /made by jane/);
    assert.equal(judgeRequest(csr('jane', ['os:admin', 'os:reader']), 1).kind, 'deny');
    assert.equal(judgeRequest(csr('jane', ['cluster-admin']), 1).kind, 'deny');
    assert.equal(
      judgeRequest(
        {
          ...csr('jane', ['os:admin']),
          spec: { ...csr('jane', ['os:admin']).spec, signerName: 'kubernetes.io/kube-apiserver-client' },
        },
        1,
      ).kind,
      'skip',
    );
  });
  it('believes a request naming someone else only from a delegate, and judges the person named', () => {
    const key = newKey();
    const csr = (cn: string, maker: string, annotation: string | undefined) => ({
      metadata: {
        name: 'x',
        ...(annotation === undefined ? {} : { annotations: { [REQUESTED_FOR_ANNOTATION]: annotation } }),
      },
      spec: {
        signerName: GATE_SIGNER,
        username: maker,
        groups: ['system:serviceaccounts'],
        expirationSeconds: 3600,
        request: Buffer.from(
          createCertificateRequest({ commonName: cn, organizations: ['os:operator'] }, key.privateKey),
        ).toString('base64'),
      },
    });
    const controller = 'system:serviceaccount:gatehouse-system:gatehouse';
    const jane = JSON.stringify({ username: 'jane', groups: ['ops'], uid: 'u1' });
    const ok = judgeRequest(csr('jane', controller, jane), 3_600_000, [controller]);
    assert.ok(ok.kind === 'check', ok.kind);
    assert.deepEqual(ok.caller, { username: 'jane', groups: ['ops'], uid: 'u1' });
    // Anyone else naming jane is refused, whoever they say they ask for.
    const forged = judgeRequest(csr('jane', 'mallory', jane), 3_600_000, [controller]);
    assert.ok(
      forged.kind === 'deny' && /only gatehouse's HTTP API/.test(forged.message),
      JSON.stringify(forged),
    );
    // Without delegates configured, nobody may.
    assert.equal(judgeRequest(csr('jane', controller, jane), 3_600_000).kind, 'deny');
    // The person named must be the request's CN, and the annotation well-formed.
    assert.equal(judgeRequest(csr('bob', controller, jane), 3_600_000, [controller]).kind, 'deny');
    for (const bad of ['{', '[]', '{"groups":["x"]}', '{"username":"jane","groups":[1]}'])
      assert.equal(judgeRequest(csr('jane', controller, bad), 3_600_000, [controller]).kind, 'deny', bad);
    assert.equal(typeof readRequestedFor('{"username":"jane"}'), 'object');
  });
});

describe('a fan-out reply (fan-out.ts)', () => {
  const frame = (message: Uint8Array, compressed = false) => {
    const body = compressed ? gzipSync(message) : Buffer.from(message);
    const head = Buffer.alloc(5);
    head[0] = compressed ? 1 : 0;
    head.writeUInt32BE(body.length, 1);
    return Buffer.concat([head, body]);
  };
  const reply = toBinary(
    RebootResponseSchema,
    create(RebootResponseSchema, { messages: [{ metadata: { hostname: '10.0.0.5' }, actorId: 'a1' }] }),
  );
  it("appends the held nodes to apid's reply as entries of failed nodes, compressed reply or not", () => {
    const extra = heldEntries([{ node: '10.0.0.6', message: 'talos gate: held' }]);
    for (const compressed of [false, true]) {
      const out = appendToReply(frame(reply, compressed), extra);
      assert.equal(out[0], 0);
      const messages = fromBinary(RebootResponseSchema, out.subarray(5)).messages;
      assert.deepEqual(
        messages.map((m) => [m.metadata?.hostname, m.actorId, m.metadata?.error, m.metadata?.status?.code]),
        [
          ['10.0.0.5', 'a1', '', undefined],
          ['10.0.0.6', '', 'talos gate: held', 9],
        ],
      );
    }
    assert.deepEqual(
      appendToReply(Buffer.alloc(0), extra),
      Buffer.alloc(0),
      'no reply (an error status): nothing to add to',
    );
  });
  it('narrows the nodes metadata to the nodes that pass', () => {
    assert.deepEqual(narrowed({ nodes: 'a,b,c', 'x-id': '1' }, ['a', 'c']), { nodes: 'a,c', 'x-id': '1' });
  });
});
