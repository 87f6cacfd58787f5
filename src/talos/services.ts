// The Talos API methods gatehouse calls, as gRPC sees them: `/<package>.<Service>/<Method>`
// with the request and response schemas and whether the server streams, taken from the
// descriptors generated from proto/ (src/talos/gen). The client (client.ts) and the
// sandbox's simulator both work from this one table.
import type { ServiceDefinition } from '@grpc/grpc-js';
import {
  create,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethod,
  type MessageInitShape,
  type MessageShape,
} from '@bufbuild/protobuf';
import * as gen from './gen/gatehouse/talos/machine_pb.ts';
import { State } from './gen/gatehouse/talos/cosi_pb.ts';

export interface Method<Req extends DescMessage = DescMessage, Res extends DescMessage = DescMessage> {
  readonly service: string;
  readonly name: string;
  /** The HTTP/2 path gRPC posts to. */
  readonly path: string;
  readonly request: Req;
  readonly response: Res;
  readonly serverStreaming: boolean;
}

type Described<Req extends DescMessage, Res extends DescMessage> = DescMethod & {
  readonly input: Req;
  readonly output: Res;
};

function method<Req extends DescMessage, Res extends DescMessage>(
  desc: Described<Req, Res>,
): Method<Req, Res> {
  const service = desc.parent.typeName;
  return {
    service,
    name: desc.name,
    path: `/${service}/${desc.name}`,
    request: desc.input,
    response: desc.output,
    serverStreaming: desc.methodKind === 'server_streaming',
  };
}

const machine = gen.MachineService.method;

export const MachineService = {
  Version: method(machine.version),
  Reboot: method(machine.reboot),
  Shutdown: method(machine.shutdown),
  Reset: method(machine.reset),
  ApplyConfiguration: method(machine.applyConfiguration),
  Upgrade: method(machine.upgrade),
  EtcdMemberList: method(machine.etcdMemberList),
  EtcdStatus: method(machine.etcdStatus),
  EtcdAlarmList: method(machine.etcdAlarmList),
  EtcdForfeitLeadership: method(machine.etcdForfeitLeadership),
  EtcdLeaveCluster: method(machine.etcdLeaveCluster),
  EtcdRemoveMemberByID: method(machine.etcdRemoveMemberByID),
  EtcdSnapshot: method(machine.etcdSnapshot),
  Rollback: method(machine.rollback),
  Events: method(machine.events),
};

/** The COSI resource API (`talosctl get`): the node's machine configuration is read through it. */
export const CosiState = {
  Get: method(State.method.get),
};

export const ImageService = {
  Pull: method(gen.ImageService.method.pull),
};

export const LifecycleService = {
  Upgrade: method(gen.LifecycleService.method.upgrade),
};

/** The wire bytes of a message, built from a plain object as `create` takes it. */
export function serializer<S extends DescMessage>(schema: S): (value: MessageInitShape<S>) => Buffer {
  return (value) => {
    const bytes = toBinary(schema, create(schema, value));
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

/** Bytes that do not decode as the message they should be (truncated, bad UTF-8, …). */
export class DecodeError extends Error {
  override readonly name = 'DecodeError';
}

/** Decodes wire bytes; fields this side does not know are kept as unknown, as proto3 requires. */
export function deserializer<S extends DescMessage>(schema: S): (bytes: Uint8Array) => MessageShape<S> {
  return (bytes) => {
    try {
      return fromBinary(schema, bytes);
    } catch (error) {
      // The library's messages ("premature EOF") do not say what was being read.
      const reason = error instanceof Error ? error.message : String(error);
      throw new DecodeError(`${schema.typeName}: ${reason}`, { cause: error });
    }
  };
}

/** A grpc-js service definition (for a server) of the given methods. */
export function serviceDefinition(methods: Record<string, Method>): ServiceDefinition {
  return Object.fromEntries(
    Object.entries(methods).map(([name, def]) => [
      name,
      {
        path: def.path,
        requestStream: false,
        responseStream: def.serverStreaming,
        requestSerialize: serializer(def.request),
        requestDeserialize: deserializer(def.request),
        responseSerialize: serializer(def.response),
        responseDeserialize: deserializer(def.response),
        originalName: name,
      },
    ]),
  );
}
