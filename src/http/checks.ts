// POST /v1/checks/{name}/evaluate[?node=]: probe a check now (a Node-scoped one for the
// node, or for every selected node), for callers allowed to read it.
// (Reading checks needs no credentials: see health.ts.)
import type { CheckRunner } from '../checks/runner.ts';
import type { Access } from './access.ts';
import { isActionName } from './actions/names.ts';
import { ApiError } from './api-error.ts';
import { checkSummary } from './health.ts';
import type { Router } from './router.ts';

export function checkRoutes(router: Router, access: Access, checks: CheckRunner): void {
  router.on(
    'POST',
    '/v1/checks/{name}/evaluate',
    access.guard('evaluate', async (req) => {
      const caller = await access.caller(req);
      const name = req.params.name ?? '';
      await access.authorize(
        caller,
        // A check's name is a DNS subdomain like an action's.
        { verb: 'get', resource: 'clusterhealthchecks', ...(isActionName(name) ? { name } : {}) },
        'gatehouse:view',
      );
      if (!checks.view(name)) throw new ApiError(404, `ClusterHealthCheck "${name}" does not exist`);
      // ?node=: a Node-scoped check for that node (a Cluster-scoped one ignores it).
      const node = req.url.searchParams.get('node') ?? undefined;
      // A probe that starts now, shared with any gate asking at the same moment.
      await checks.evaluateNow([name], node);
      const view = checks.view(name);
      if (!view) throw new ApiError(404, `ClusterHealthCheck "${name}" was deleted while it was evaluated`);
      return { status: 200, body: checkSummary(view, view.scope === 'Node' ? node : undefined) };
    }),
  );
}
