// A RestClient for a plain HTTP server of a unit test's own, listening on 127.0.0.1.
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import { RestClient } from '../../src/kube/rest.ts';

export function localRest(server: Server): RestClient {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: 'c',
        server: `http://127.0.0.1:${String((server.address() as AddressInfo).port)}`,
        skipTLSVerify: true,
      },
    ],
    users: [{ name: 'u' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return new RestClient(kc);
}
