import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { status } from '@grpc/grpc-js';
import { GrpcStatus } from '../../src/talos/grpc-status.ts';
import { grpcCodeName } from '../../src/talos/errors.ts';

describe("gRPC's status codes, kept without loading the gRPC library", () => {
  it('are the codes @grpc/grpc-js has, by name and number', () => {
    const theirs = Object.entries(status).filter((e): e is [string, number] => typeof e[1] === 'number');
    assert.deepEqual(new Map(Object.entries(GrpcStatus)), new Map(theirs));
  });

  it('name a code in an error, and say the number of one unknown', () => {
    assert.equal(grpcCodeName(14), 'UNAVAILABLE');
    assert.equal(grpcCodeName(99), 'code 99');
  });
});
