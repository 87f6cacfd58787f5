// How Talos API failures are told apart and worded (the TLS cases end to end are in
// test/integration/talos.test.ts).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { classifyConnection, statusError, TalosUpgradeFailedError } from '../../src/talos/errors.ts';

const call = { call: 'MachineService.Reboot', node: '10.5.0.3', endpoint: '127.0.0.1:50000' };

describe('Talos API errors', () => {
  it('name the call, the node, the endpoint and Talos’ own message', () => {
    const error = statusError(
      { ...call, code: status.FAILED_PRECONDITION, talosMessage: 'etcd is unhealthy' },
      1000,
      false,
    );
    assert.equal(
      error.message,
      'Talos MachineService.Reboot on node 10.5.0.3 via 127.0.0.1:50000 failed: etcd is unhealthy (FAILED_PRECONDITION)',
    );
    assert.equal(error.failure, 'status');
    assert.equal(error.codeName, 'FAILED_PRECONDITION');
    assert.equal(error.talosMessage, 'etcd is unhealthy');
  });

  it('say how long a call waited when its deadline passed', () => {
    const error = statusError(
      { ...call, code: status.DEADLINE_EXCEEDED, talosMessage: 'Deadline exceeded' },
      1500,
      false,
    );
    assert.equal(error.failure, 'deadline');
    assert.match(error.message, /failed: no answer within 1\.5s \(DEADLINE_EXCEEDED\)$/);
  });

  it('tell a cancellation by the caller from one by the server', () => {
    assert.equal(
      statusError({ ...call, code: status.CANCELLED, talosMessage: 'x' }, 1, true).failure,
      'cancelled',
    );
    assert.equal(
      statusError({ ...call, code: status.CANCELLED, talosMessage: 'x' }, 1, false).failure,
      'status',
    );
  });

  it('name the endpoint itself when the call targeted no node', () => {
    const error = statusError(
      { ...call, node: undefined, code: status.UNKNOWN, talosMessage: 'x' },
      1,
      false,
    );
    assert.match(error.message, /^Talos MachineService\.Reboot on the endpoint itself via/);
  });

  it('report an installer failure with its exit code and last line', () => {
    const error = new TalosUpgradeFailedError({ ...call, call: 'LifecycleService.Upgrade' }, 3, [
      'installing',
      'error: no space left',
    ]);
    assert.equal(error.failure, 'exit-code');
    assert.equal(error.exitCode, 3);
    assert.match(
      error.message,
      /LifecycleService\.Upgrade .* failed: the installer exited with code 3: error: no space left$/,
    );
  });
});

describe('diagnosing a failed connection', () => {
  it('blames the server certificate when the client could not verify it', () => {
    const diagnosis = classifyConnection('handshake', {
      receivedData: false,
      error: { code: 'SELF_SIGNED_CERT_IN_CHAIN', message: 'self-signed certificate in certificate chain' },
    });
    assert.deepEqual(diagnosis, {
      failure: 'tls-server-certificate',
      detail: 'self-signed certificate in certificate chain (SELF_SIGNED_CERT_IN_CHAIN)',
    });
    assert.equal(
      classifyConnection('handshake', {
        receivedData: false,
        error: { code: 'ERR_TLS_CERT_ALTNAME_INVALID', message: 'x' },
      }).failure,
      'tls-server-certificate',
    );
  });

  it('blames the client certificate on a certificate alert, or a hang-up right after the handshake', () => {
    for (const message of [
      'error:0A000418:SSL routines::tlsv1 alert unknown ca',
      'error:0A000412:SSL routines::sslv3 alert bad certificate',
      'error:0A00045C:SSL routines::tlsv13 alert certificate required',
      'SSL alert number 42',
    ])
      assert.equal(
        classifyConnection('established', { receivedData: false, error: { message } }).failure,
        'tls-client-certificate',
        message,
      );
    assert.deepEqual(classifyConnection('established', { receivedData: false }), {
      failure: 'tls-client-certificate',
      detail: 'the endpoint closed the connection right after the TLS handshake',
    });
  });

  it('calls a network failure unreachable, and a server that answers fine', () => {
    assert.deepEqual(
      classifyConnection('connect', {
        receivedData: false,
        error: { code: 'ECONNREFUSED', message: 'connect ECONNREFUSED 127.0.0.1:1' },
      }),
      { failure: 'unreachable', detail: 'connect ECONNREFUSED 127.0.0.1:1' },
    );
    assert.deepEqual(classifyConnection('established', { receivedData: true }), { failure: 'none' });
  });
});
