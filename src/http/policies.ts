// GET /v1/policies: the ActionPolicies, for callers allowed to read them.
import { ACTION_POLICIES_PATH } from '../api/paths.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { RestClient } from '../kube/rest.ts';
import type { Access } from './access.ts';
import { apiServerUnavailable } from './auth.ts';
import { objectView } from './objects.ts';
import type { Router } from './router.ts';

export function policyRoutes(router: Router, access: Access, rest: RestClient): void {
  router.on(
    'GET',
    '/v1/policies',
    access.guard('policies', async (req) => {
      const caller = await access.caller(req);
      await access.authorize(caller, { verb: 'list', resource: 'actionpolicies' }, 'gatehouse:view');
      try {
        const list = await rest.request<{ items: (KubeObject & { spec?: unknown })[] }>(ACTION_POLICIES_PATH);
        const items = list.items
          .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
          .map((p) => objectView({ ...p, kind: 'ActionPolicy' }));
        return { status: 200, body: { items } };
      } catch (error) {
        throw apiServerUnavailable('list ActionPolicies', error);
      }
    }),
  );
}
