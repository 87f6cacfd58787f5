// The Talos messages generated from proto/ against bytes worked out by hand from the
// protobuf encoding rules, so that a mistake in the schema (a field number, a type)
// cannot cancel itself out between encoder and decoder.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { create, equals, type DescMessage, type MessageInitShape } from '@bufbuild/protobuf';
import { DurationSchema, SourceCodeInfo_LocationSchema } from '@bufbuild/protobuf/wkt';
import * as m from '../../src/talos/gen/gatehouse/talos/machine_pb.ts';
import { DecodeError, deserializer, serializer } from '../../src/talos/services.ts';

const bytes = (...values: number[]) => Uint8Array.from(values);
const ascii = (text: string) => [...Buffer.from(text, 'utf8')];
// Through the same (de)serializers the gRPC client and the simulator use.
const encode = <S extends DescMessage>(schema: S, init: MessageInitShape<S>) =>
  Uint8Array.from(serializer(schema)(init));
const decode = <S extends DescMessage>(schema: S, data: Uint8Array) => deserializer(schema)(data);
/** A decoded message's fields, without the library's `$typeName` tag. */
const fields = (message: object) =>
  Object.fromEntries(Object.entries(message).filter(([k]) => k !== '$typeName'));

describe('protobuf encoding', () => {
  it('leaves out proto3 zero values and writes the others as key + varint', () => {
    assert.deepEqual(encode(m.RebootRequestSchema, { mode: m.RebootRequest_Mode.DEFAULT }), bytes());
    assert.deepEqual(
      encode(m.RebootRequestSchema, { mode: m.RebootRequest_Mode.POWERCYCLE }),
      bytes(0x08, 0x01),
    );
    assert.deepEqual(encode(m.RebootRequestSchema, { mode: m.RebootRequest_Mode.FORCE }), bytes(0x08, 0x02));
    assert.deepEqual(encode(m.ShutdownRequestSchema, { force: true }), bytes(0x08, 0x01));
  });

  it('writes strings, bools and enums under their field numbers', () => {
    // image = 1 (string), stage = 3 (bool), reboot_mode = 5 (enum)
    assert.deepEqual(
      encode(m.UpgradeRequestSchema, { image: 'a', preserve: false, stage: true, rebootMode: 1 }),
      bytes(0x0a, 0x01, 0x61, 0x18, 0x01, 0x28, 0x01),
    );
  });

  it('nests messages as length-delimited fields and repeats fields per element', () => {
    // system_partitions_to_wipe = 3 (message), user_disks_to_wipe = 4 (repeated string), mode = 5
    const encoded = encode(m.ResetRequestSchema, {
      graceful: true,
      systemPartitionsToWipe: [{ label: 'STATE', wipe: true }],
      userDisksToWipe: ['/dev/sdb', '/dev/sdc'],
      mode: m.ResetRequest_WipeMode.USER_DISKS,
    });
    assert.deepEqual(
      encoded,
      bytes(
        0x08, 0x01,
        0x1a, 0x09, 0x0a, 0x05, ...ascii('STATE'), 0x10, 0x01,
        0x22, 0x08, ...ascii('/dev/sdb'),
        0x22, 0x08, ...ascii('/dev/sdc'),
        0x28, 0x02,
      ), // prettier-ignore
    );
  });

  it('writes bytes, a nested Duration, and multi-byte varints', () => {
    // data = 1 (bytes), mode = 4, try_mode_timeout = 6 (Duration: seconds = 300)
    assert.deepEqual(
      encode(m.ApplyConfigurationRequestSchema, {
        data: bytes(1, 2),
        mode: m.ApplyConfigurationRequest_Mode.NO_REBOOT,
        tryModeTimeout: { seconds: 300n },
      }),
      bytes(0x0a, 0x02, 0x01, 0x02, 0x20, 0x02, 0x32, 0x03, 0x08, 0xac, 0x02),
    );
  });

  it('sends a negative int32 as ten bytes of two’s complement', () => {
    assert.deepEqual(
      encode(DurationSchema, { nanos: -1 }),
      bytes(0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
    );
    assert.equal(decode(DurationSchema, encode(DurationSchema, { nanos: -1 })).nanos, -1);
  });

  it('sends a oneof member even when it holds its zero value', () => {
    // LifecycleServiceInstallProgress.exit_code = 2, inside the response's progress = 1
    assert.deepEqual(
      encode(m.LifecycleServiceInstallProgressSchema, { response: { case: 'exitCode', value: 0 } }),
      bytes(0x10, 0x00),
    );
    assert.deepEqual(
      encode(m.LifecycleServiceUpgradeResponseSchema, {
        progress: { response: { case: 'exitCode', value: 0 } },
      }),
      bytes(0x0a, 0x02, 0x10, 0x00),
    );
    assert.deepEqual(
      encode(m.ImageServicePullResponseSchema, { response: { case: 'name', value: '' } }),
      bytes(0x0a, 0x00),
    );
  });

  it('packs repeated numbers', () => {
    // No Talos message gatehouse speaks has one; SourceCodeInfo.Location.path (1) is packed.
    const Numbers = SourceCodeInfo_LocationSchema;
    assert.deepEqual(encode(Numbers, { path: [1, 2, 300] }), bytes(0x0a, 0x04, 0x01, 0x02, 0xac, 0x02));
    assert.deepEqual(encode(Numbers, { path: [] }), bytes());
  });

  it('refuses values out of range, naming the field', () => {
    // Types are the compiler's to check; what a type cannot say is caught on encoding.
    assert.throws(
      () => encode(m.RebootRequestSchema, { mode: 1.5 as m.RebootRequest_Mode }),
      /machine\.RebootRequest\.mode.*invalid int32/,
    );
    assert.throws(
      () => encode(m.RebootRequestSchema, { mode: (2 ** 31) as m.RebootRequest_Mode }),
      /machine\.RebootRequest\.mode.*invalid int32/,
    );
  });

  it('sends no field 3 in LifecycleServiceUpgradeRequest: no Talos version has one', () => {
    assert.deepEqual(
      m.LifecycleServiceUpgradeRequestSchema.fields.map((f) => f.number),
      [1, 2],
    );
  });
});

describe('protobuf decoding', () => {
  it('fills in proto3 zero values for fields that were not sent', () => {
    const upgrade = decode(m.UpgradeSchema, bytes());
    assert.deepEqual(
      { metadata: undefined, ...fields(upgrade) },
      { metadata: undefined, ack: '', actorId: '' },
    );
    assert.deepEqual(decode(m.LifecycleServiceInstallProgressSchema, bytes()).response, { case: undefined });
    assert.deepEqual(decode(m.ApplyConfigurationSchema, bytes()).warnings, []);
  });

  it('reads a Version reply and skips fields it does not know, of every wire type', () => {
    const reply = bytes(
      0x0a, 0x24, // messages[0], 36 bytes
      0x0a, 0x05, 0x0a, 0x03, ...ascii('cp1'), // metadata { hostname: "cp1" }
      0x12, 0x08, 0x0a, 0x06, ...ascii('v1.2.3'), // version { tag: "v1.2.3" }
      0x48, 0x96, 0x01, // unknown field 9, varint 150
      0x51, 1, 2, 3, 4, 5, 6, 7, 8, // unknown field 10, 64-bit
      0x5d, 1, 2, 3, 4, // unknown field 11, 32-bit
      0x62, 0x00, // unknown field 12, empty length-delimited
    ); // prettier-ignore
    const decoded = decode(m.VersionResponseSchema, reply);
    assert.equal(decoded.messages.length, 1);
    assert.equal(decoded.messages[0]?.metadata?.hostname, 'cp1');
    assert.equal(decoded.messages[0].version?.tag, 'v1.2.3');
    assert.equal(decoded.messages[0].version.arch, '');
    assert.equal(decoded.messages[0].platform, undefined);
  });

  it('reads the error Talos puts in a reply’s metadata', () => {
    const decoded = decode(
      m.RebootResponseSchema,
      encode(m.RebootResponseSchema, {
        messages: [{ metadata: { hostname: 'n1', error: 'locked', status: { code: 9, message: 'locked' } } }],
      }),
    );
    const metadata = decoded.messages[0]?.metadata;
    assert.ok(metadata?.status);
    assert.deepEqual(
      { ...fields(metadata), status: fields(metadata.status) },
      {
        hostname: 'n1',
        error: 'locked',
        status: { code: 9, message: 'locked' },
      },
    );
  });

  it('accepts repeated numbers packed or one by one', () => {
    const Numbers = SourceCodeInfo_LocationSchema;
    assert.deepEqual(decode(Numbers, bytes(0x0a, 0x03, 0x01, 0x02, 0x03)).path, [1, 2, 3]);
    assert.deepEqual(decode(Numbers, bytes(0x08, 0x01, 0x08, 0x02, 0x0a, 0x01, 0x03)).path, [1, 2, 3]);
  });

  it('reads 64-bit integers beyond 32 bits', () => {
    const progress = {
      status: m.ImageServicePullLayerProgress_Status.EXTRACTING,
      offset: 2n ** 40n + 5n,
      total: 2n ** 41n,
    };
    assert.deepEqual(
      fields(
        decode(
          m.ImageServicePullLayerProgressSchema,
          encode(m.ImageServicePullLayerProgressSchema, progress),
        ),
      ),
      {
        ...progress,
      },
    );
    // etcd member IDs use all 64 bits: never rounded through a double.
    const id = 0xfedcba9876543210n;
    assert.equal(decode(m.EtcdMemberSchema, encode(m.EtcdMemberSchema, { id })).id, id);
  });

  it('reports truncated or malformed input with the message it was reading', () => {
    assert.throws(() => decode(m.UpgradeRequestSchema, bytes(0x0a, 0x05, 0x61)), DecodeError);
    assert.throws(
      () => decode(m.UpgradeRequestSchema, bytes(0x0a, 0x05, 0x61)),
      /machine\.UpgradeRequest: premature EOF/,
    );
    assert.throws(() => decode(m.RebootRequestSchema, bytes(0x08, 0x80)), /RebootRequest: premature EOF/);
    assert.throws(() => decode(m.UpgradeRequestSchema, bytes(0x08, 0x01)), /machine\.UpgradeRequest: /);
    assert.throws(
      () => decode(m.UpgradeRequestSchema, bytes(0x0a, 0x01, 0xff)),
      /UpgradeRequest: .*not valid .*utf-8/,
    );
    assert.throws(() => decode(m.RebootRequestSchema, bytes(0x13)), DecodeError);
  });

  it('round-trips any ApplyConfiguration reply', () => {
    const text = fc.string({ unit: 'grapheme', maxLength: 20 });
    fc.assert(
      fc.property(
        fc.record(
          {
            metadata: fc.option(
              fc.record(
                { hostname: text, error: text, status: fc.constant(undefined) },
                { noNullPrototype: true },
              ),
              {
                nil: undefined,
              },
            ),
            warnings: fc.array(text, { maxLength: 3 }),
            mode: fc
              .integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })
              .map((n) => n as m.ApplyConfigurationRequest_Mode),
            modeDetails: text,
          },
          { noNullPrototype: true },
        ),
        (reply) => {
          const expected = create(m.ApplyConfigurationSchema, reply);
          const decoded = decode(m.ApplyConfigurationSchema, encode(m.ApplyConfigurationSchema, reply));
          assert.ok(equals(m.ApplyConfigurationSchema, decoded, expected));
          assert.deepEqual(decoded.warnings, reply.warnings);
          assert.equal(decoded.metadata?.hostname, reply.metadata?.hostname);
        },
      ),
    );
  });
});
