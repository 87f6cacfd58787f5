// NodeRollouts in integration tests: created for test node groups (the sandbox's
// simulated Talos nodes, test/support/talos-nodes.ts), read, waited on, and cleaned up
// with their NodeActions (cancelled by a controller still running, finalizers lifted if
// none runs any more).
import type { TestContext } from 'node:test';
import { INSTANCE_LABEL, ROLLOUT_LABEL } from '../../src/api/names.ts';
import type { NodeRollout, NodeRolloutSpec } from '../../src/api/node-rollout.ts';
import type { RestClient } from '../../src/kube/rest.ts';
import { API, deleteAfter, type ActionObject } from './gate.ts';
import { uniqueName, waitFor } from './kube.ts';
import { GROUP_LABEL } from './talos-nodes.ts';

export const ROLLOUT_IMAGE = 'ghcr.io/siderolabs/installer:v1.13.1';

export type RolloutObject = NodeRollout & {
  metadata: { name: string; uid: string; resourceVersion: string };
};

/** An upgrade to ROLLOUT_IMAGE of the nodes of these test groups. */
export function upgradeOf(groups: string[]): Pick<NodeRolloutSpec, 'action' | 'upgrade' | 'nodeSelector'> {
  return {
    action: 'Upgrade',
    upgrade: { image: ROLLOUT_IMAGE },
    nodeSelector: { matchExpressions: [{ key: GROUP_LABEL, operator: 'In', values: groups }] },
  };
}

export const condition = (r: RolloutObject, type: string) =>
  r.status?.conditions?.find((c) => c.type === type);

export const complete = (r: RolloutObject) => condition(r, 'Complete')?.status === 'True';

/** Rollouts of one test file: its client, and who requests them. */
export class Rollouts {
  readonly client: RestClient;
  me = '';
  constructor(client: RestClient) {
    this.client = client;
  }

  async createRollout(
    t: TestContext,
    instance: string,
    groups: string[],
    spec: Partial<NodeRolloutSpec> = {},
  ): Promise<string> {
    const name = uniqueName('roll');
    await this.client.request(`${API}/noderollouts`, {
      method: 'POST',
      body: {
        apiVersion: 'talos.dev/v1alpha1',
        kind: 'NodeRollout',
        metadata: { name, labels: { [INSTANCE_LABEL]: instance } },
        spec: {
          ...upgradeOf(groups),
          requestedBy: this.me,
          ...spec,
        },
      },
    });
    deleteAfter(t, this.client, `${API}/noderollouts/${name}`);
    // Registered before the rollout's own deletion runs: its actions go first, cancelled by a
    // controller still running, finalizers lifted if none runs any more.
    t.after(() => this.deleteRolloutActions(name));
    return name;
  }

  getRollout(name: string): Promise<RolloutObject> {
    return this.client.request<RolloutObject>(`${API}/noderollouts/${name}`);
  }

  async rolloutActions(name: string): Promise<ActionObject[]> {
    const list = await this.client.request<{ items: ActionObject[] }>(
      `${API}/nodeactions?labelSelector=${encodeURIComponent(`${ROLLOUT_LABEL}=${name}`)}`,
    );
    return list.items;
  }

  async waitForRollout(name: string, what: string, ok: (r: RolloutObject) => boolean, timeoutMs = 240_000) {
    return waitFor(
      `rollout ${name} ${what}`,
      async () => {
        const r = await this.getRollout(name);
        return ok(r) ? r : undefined;
      },
      { timeoutMs, intervalMs: 500 },
    );
  }

  /** Deletes a rollout's actions, waits for their controller to let them go, and lifts what is left's finalizers. */
  async deleteRolloutActions(name: string): Promise<void> {
    const names = (await this.rolloutActions(name)).map((a) => a.metadata.name);
    await Promise.all(
      names.map((n) =>
        this.client.request(`${API}/nodeactions/${n}`, { method: 'DELETE' }).catch(() => undefined),
      ),
    );
    const gone = async () => (await this.rolloutActions(name)).length === 0;
    await waitFor('the rollout actions to go', async () => ((await gone()) ? true : undefined), {
      timeoutMs: 15_000,
      intervalMs: 500,
    }).catch(async () => {
      for (const a of await this.rolloutActions(name))
        await this.client
          .request(`${API}/nodeactions/${a.metadata.name}`, {
            method: 'PATCH',
            contentType: 'application/merge-patch+json',
            body: { metadata: { finalizers: null } },
          })
          .catch(() => undefined);
    });
  }

  /**
   * Sets a node's osImage (its Talos version). kwok rewrites a node's status from what it
   * last read, so a write can be undone by one of its own in flight: written until it
   * reads back the same several times over.
   */
  async setOsImage(node: string, version: string): Promise<void> {
    const osImage = `Talos (${version})`;
    let steady = 0;
    await waitFor(
      `node ${node} to keep ${osImage}`,
      async () => {
        const n = await this.client.request<{ status?: { nodeInfo?: { osImage?: string } } }>(
          `/api/v1/nodes/${node}`,
        );
        if (n.status?.nodeInfo?.osImage === osImage) return ++steady >= 4 ? true : undefined;
        steady = 0;
        await this.client.request(`/api/v1/nodes/${node}/status`, {
          method: 'PATCH',
          contentType: 'application/merge-patch+json',
          body: { status: { nodeInfo: { osImage } } },
        });
        return undefined;
      },
      { timeoutMs: 30_000, intervalMs: 500 },
    );
  }
}
