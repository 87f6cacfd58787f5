// The wire codec against bytes worked out by hand from the protobuf encoding rules,
// so that a mistake cannot cancel itself out between encoder and decoder.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import * as m from '../../src/talos/messages.ts';
import { decode, DecodeError, encode, message } from '../../src/talos/protobuf.ts';

const bytes = (...values: number[]) => Uint8Array.from(values);
const ascii = (text: string) => [...Buffer.from(text, 'utf8')];

describe('protobuf encoding', () => {
  it('leaves out proto3 zero values and writes the others as key + varint', () => {
    assert.deepEqual(encode(m.RebootRequest, { mode: m.RebootMode.DEFAULT }), bytes());
    assert.deepEqual(encode(m.RebootRequest, { mode: m.RebootMode.POWERCYCLE }), bytes(0x08, 0x01));
    assert.deepEqual(encode(m.ShutdownRequest, { force: true }), bytes(0x08, 0x01));
  });

  it('writes strings, bools and enums under their field numbers', () => {
    // image = 1 (string), stage = 3 (bool), reboot_mode = 5 (enum)
    assert.deepEqual(
      encode(m.UpgradeRequest, { image: 'a', preserve: false, stage: true, rebootMode: 1 }),
      bytes(0x0a, 0x01, 0x61, 0x18, 0x01, 0x28, 0x01),
    );
  });

  it('nests messages as length-delimited fields and repeats fields per element', () => {
    // system_partitions_to_wipe = 3 (message), user_disks_to_wipe = 4 (repeated string), mode = 5
    const encoded = encode(m.ResetRequest, {
      graceful: true,
      systemPartitionsToWipe: [{ label: 'STATE', wipe: true }],
      userDisksToWipe: ['/dev/sdb', '/dev/sdc'],
      mode: m.ResetWipeMode.USER_DISKS,
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
      encode(m.ApplyConfigurationRequest, {
        data: bytes(1, 2),
        mode: m.ApplyMode.NO_REBOOT,
        tryModeTimeout: { seconds: 300 },
      }),
      bytes(0x0a, 0x02, 0x01, 0x02, 0x20, 0x02, 0x32, 0x03, 0x08, 0xac, 0x02),
    );
  });

  it('sends a negative int32 as ten bytes of two’s complement', () => {
    assert.deepEqual(
      encode(m.Duration, { nanos: -1 }),
      bytes(0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
    );
    assert.equal(decode(m.Duration, encode(m.Duration, { nanos: -1 })).nanos, -1);
  });

  it('sends a oneof member even when it holds its zero value', () => {
    // LifecycleServiceInstallProgress.exit_code = 2, inside the response's progress = 1
    assert.deepEqual(encode(m.LifecycleServiceInstallProgress, { exitCode: 0 }), bytes(0x10, 0x00));
    assert.deepEqual(
      encode(m.LifecycleServiceUpgradeResponse, { progress: { exitCode: 0 } }),
      bytes(0x0a, 0x02, 0x10, 0x00),
    );
    assert.deepEqual(encode(m.ImageServicePullResponse, { name: '' }), bytes(0x0a, 0x00));
  });

  it('packs repeated numbers', () => {
    const Numbers = message('test.Numbers', { values: { no: 1, kind: 'int32', repeated: true } });
    assert.deepEqual(encode(Numbers, { values: [1, 2, 300] }), bytes(0x0a, 0x04, 0x01, 0x02, 0xac, 0x02));
    assert.deepEqual(encode(Numbers, { values: [] }), bytes());
  });

  it('refuses values of the wrong type or out of range, naming the field', () => {
    assert.throws(
      () => encode(m.RebootRequest, { mode: 1.5 }),
      /machine\.RebootRequest\.mode: expected an integer/,
    );
    assert.throws(
      () => encode(m.UpgradeRequest, { image: 7 as unknown as string }),
      /machine\.UpgradeRequest\.image: expected a string/,
    );
    assert.throws(() => encode(m.RebootRequest, { mode: 2 ** 31 }), /out of range for enum/);
  });

  it('refuses a message declaration that repeats a field number', () => {
    assert.throws(
      () => message('test.Twice', { a: { no: 1, kind: 'string' }, b: { no: 1, kind: 'bool' } }),
      /test\.Twice\.b: field number 1 twice/,
    );
  });
});

describe('protobuf decoding', () => {
  it('fills in proto3 zero values for fields that were not sent', () => {
    assert.deepEqual(decode(m.Upgrade, bytes()), { metadata: undefined, ack: '', actorId: '' });
    assert.deepEqual(decode(m.LifecycleServiceInstallProgress, bytes()), {
      message: undefined,
      exitCode: undefined,
    });
    assert.deepEqual(decode(m.ApplyConfiguration, bytes()).warnings, []);
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
    const decoded = decode(m.VersionResponse, reply);
    assert.equal(decoded.messages.length, 1);
    assert.equal(decoded.messages[0]?.metadata?.hostname, 'cp1');
    assert.equal(decoded.messages[0].version?.tag, 'v1.2.3');
    assert.equal(decoded.messages[0].version.arch, '');
    assert.equal(decoded.messages[0].platform, undefined);
  });

  it('reads the error Talos puts in a reply’s metadata', () => {
    const decoded = decode(
      m.RebootResponse,
      encode(m.RebootResponse, {
        messages: [{ metadata: { hostname: 'n1', error: 'locked', status: { code: 9, message: 'locked' } } }],
      }),
    );
    assert.deepEqual(decoded.messages[0]?.metadata, {
      hostname: 'n1',
      error: 'locked',
      status: { code: 9, message: 'locked' },
    });
  });

  it('accepts repeated numbers packed or one by one', () => {
    const Numbers = message('test.Numbers', { values: { no: 1, kind: 'uint32', repeated: true } });
    assert.deepEqual(decode(Numbers, bytes(0x0a, 0x03, 0x01, 0x02, 0x03)).values, [1, 2, 3]);
    assert.deepEqual(decode(Numbers, bytes(0x08, 0x01, 0x08, 0x02, 0x0a, 0x01, 0x03)).values, [1, 2, 3]);
  });

  it('reads 64-bit integers beyond 32 bits', () => {
    const progress = { status: m.LayerPullStatus.EXTRACTING, offset: 2 ** 40 + 5, total: 2 ** 41 };
    assert.deepEqual(
      decode(m.ImageServicePullLayerProgress, encode(m.ImageServicePullLayerProgress, progress)),
      {
        ...progress,
        elapsed: undefined,
      },
    );
  });

  it('reports truncated or malformed input with the message it was reading', () => {
    assert.throws(() => decode(m.UpgradeRequest, bytes(0x0a, 0x05, 0x61)), DecodeError);
    assert.throws(
      () => decode(m.UpgradeRequest, bytes(0x0a, 0x05, 0x61)),
      /machine\.UpgradeRequest: field of 5 bytes/,
    );
    assert.throws(() => decode(m.RebootRequest, bytes(0x08, 0x80)), /truncated varint/);
    assert.throws(
      () => decode(m.UpgradeRequest, bytes(0x08, 0x01)),
      /UpgradeRequest\.image: expected string/,
    );
    assert.throws(() => decode(m.UpgradeRequest, bytes(0x0a, 0x01, 0xff)), /image: not valid UTF-8/);
    assert.throws(() => decode(m.RebootRequest, bytes(0x13)), /unsupported wire type 3/);
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
            mode: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
            modeDetails: text,
          },
          { noNullPrototype: true },
        ),
        (reply) => {
          assert.deepEqual(decode(m.ApplyConfiguration, encode(m.ApplyConfiguration, reply)), reply);
        },
      ),
    );
  });
});
