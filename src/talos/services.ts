// The Talos API methods gatehouse calls, as gRPC sees them: `/<package>.<Service>/<Method>`
// with the request and response messages and whether the server streams. The client
// (client.ts) and the sandbox's simulator both work from this one table.
import type { ServiceDefinition } from '@grpc/grpc-js';
import * as m from './messages.ts';
import { decode, encode, type Fields, type Message, type MessageInit, type MessageType } from './protobuf.ts';

export interface Method<Req extends Fields = Fields, Res extends Fields = Fields> {
  readonly service: string;
  readonly name: string;
  /** The HTTP/2 path gRPC posts to. */
  readonly path: string;
  readonly request: MessageType<Req>;
  readonly response: MessageType<Res>;
  readonly serverStreaming: boolean;
}

function method<Req extends Fields, Res extends Fields>(
  service: string,
  name: string,
  request: MessageType<Req>,
  response: MessageType<Res>,
  serverStreaming = false,
): Method<Req, Res> {
  return { service, name, path: `/${service}/${name}`, request, response, serverStreaming };
}

const MACHINE = 'machine.MachineService';
const IMAGE = 'machine.ImageService';
const LIFECYCLE = 'machine.LifecycleService';

export const MachineService = {
  Version: method(MACHINE, 'Version', m.Empty, m.VersionResponse),
  Reboot: method(MACHINE, 'Reboot', m.RebootRequest, m.RebootResponse),
  Shutdown: method(MACHINE, 'Shutdown', m.ShutdownRequest, m.ShutdownResponse),
  Reset: method(MACHINE, 'Reset', m.ResetRequest, m.ResetResponse),
  ApplyConfiguration: method(
    MACHINE,
    'ApplyConfiguration',
    m.ApplyConfigurationRequest,
    m.ApplyConfigurationResponse,
  ),
  Upgrade: method(MACHINE, 'Upgrade', m.UpgradeRequest, m.UpgradeResponse),
};

export const ImageService = {
  Pull: method(IMAGE, 'Pull', m.ImageServicePullRequest, m.ImageServicePullResponse, true),
};

export const LifecycleService = {
  Upgrade: method(
    LIFECYCLE,
    'Upgrade',
    m.LifecycleServiceUpgradeRequest,
    m.LifecycleServiceUpgradeResponse,
    true,
  ),
};

export function serializer<F extends Fields>(type: MessageType<F>): (value: MessageInit<F>) => Buffer {
  return (value) => {
    const bytes = encode(type, value);
    return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  };
}

export function deserializer<F extends Fields>(type: MessageType<F>): (bytes: Buffer) => Message<F> {
  return (bytes) => decode(type, bytes);
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
