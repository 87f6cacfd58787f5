// The controller's HTTP server: every resource's routes on one router over node:http.
// Every answer is JSON (or Prometheus text, or the dashboard's files); bad input gets a
// 4xx that says what to fix, never a 5xx.
//
//   /v1/health[/{check}]            health.ts      unauthenticated, read-only
//   /v1/actions[/...]               actions/       authenticated (access.ts)
//   /v1/policies                    policies.ts    authenticated
//   /v1/checks/{name}/evaluate      checks.ts      authenticated
//   /v1/whoami, /v1/talos/...       src/talos-gate/certificate-routes.ts (via `routes`)
//   /openapi.json                   openapi.ts
//   /, /dashboard, /v1/dashboard    dashboard.ts   unauthenticated, read-only
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CheckRunner } from '../checks/runner.ts';
import type { Logger } from '../log.ts';
import type { Metrics } from '../metrics.ts';
import { errorMessage } from '../wait.ts';
import { Access, type ApiLimits, type AuthCacheOptions } from './access.ts';
import { actionRoutes, type ActionsApiOptions } from './actions/routes.ts';
import { checkRoutes } from './checks.ts';
import { dashboardRoutes, type Dashboard, type DashboardSources } from './dashboard.ts';
import { healthRoutes, type HealthSources } from './health.ts';
import { openApiRoutes } from './openapi.ts';
import { policyRoutes } from './policies.ts';
import { HttpError, type Reply, type Request, type Router } from './router.ts';

export interface ApiOptions extends ActionsApiOptions {
  checks: CheckRunner;
  nodeLabels: HealthSources['nodeLabels'];
  etcd?: HealthSources['etcd'];
  metrics?: Metrics;
  limits?: Partial<ApiLimits>;
  auth?: AuthCacheOptions;
  /** Serve the dashboard from these; undefined: no dashboard. */
  dashboard?: DashboardSources;
  /** Show the dashboard's actions to anonymous readers too (default false: readers allowed to list nodeactions). */
  dashboardAnonymousActions?: boolean;
  /** Routes of other parts (the Talos API gate's), registered with the same access rules. */
  routes?: ((router: Router, access: Access) => void)[];
}

/** Registers every route of the controller's API. */
export function apiRoutes(router: Router, options: ApiOptions): { dashboard: Dashboard | undefined } {
  const access = new Access({
    rest: options.rest,
    log: options.log,
    ...(options.metrics ? { metrics: options.metrics } : {}),
    ...(options.limits ? { limits: options.limits } : {}),
    ...(options.auth ? { auth: options.auth } : {}),
  });
  healthRoutes(router, {
    checks: options.checks,
    nodeLabels: options.nodeLabels,
    ...(options.etcd ? { etcd: options.etcd } : {}),
  });
  actionRoutes(router, access, options);
  policyRoutes(router, access, options.rest);
  checkRoutes(router, access, options.checks);
  for (const routes of options.routes ?? []) routes(router, access);
  openApiRoutes(router, access.limits);
  if (!options.dashboard) return { dashboard: undefined };
  // The dashboard's actions (requesters, bypass reasons) need what GET /v1/actions needs.
  const mayReadActions = async (req: Request): Promise<boolean> => {
    if (req.raw.headers.authorization === undefined) return false;
    const caller = await access.caller(req);
    return (await access.authorizer.decide(caller, { verb: 'list', resource: 'nodeactions' })).allowed;
  };
  return {
    dashboard: dashboardRoutes(router, {
      ...options.dashboard,
      ...(options.dashboardAnonymousActions === true ? {} : { mayReadActions }),
    }),
  };
}

function send(res: ServerResponse, reply: Reply, head: boolean): void {
  if (res.headersSent) return;
  if (reply.status === 304) {
    // No content, so no Content-Type or Content-Length (that would be the 200's).
    res.writeHead(304, { 'Cache-Control': 'no-store', ...reply.headers });
    res.end();
    return;
  }
  // Bodies are objects (sent as JSON), or strings and bytes (sent as they are, with their contentType).
  const payload =
    reply.body === undefined
      ? ''
      : typeof reply.body === 'string' || reply.body instanceof Uint8Array
        ? reply.body
        : `${JSON.stringify(reply.body)}\n`;
  res.writeHead(reply.status, {
    'Content-Type': reply.contentType ?? 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(payload),
    'Cache-Control': 'no-store',
    ...reply.headers,
  });
  res.end(head ? undefined : payload);
}

export function startServer(
  router: Router,
  options: { host: string; port: number; log: Logger },
): Promise<Server> {
  const server = createServer((req, res) => {
    router.handle(req, res).then(
      (reply) => {
        if (reply) send(res, reply, req.method === 'HEAD');
      },
      (error: unknown) => {
        if (error instanceof HttpError) {
          send(res, { status: error.status, body: { error: error.message } }, false);
          return;
        }
        // A bug of ours: logged in full, reported without internals, and still not a crash.
        options.log.error({ err: errorMessage(error), url: req.url }, 'request failed');
        send(res, { status: 500, body: { error: 'internal error; see the controller log' } }, false);
      },
    );
  });
  server.keepAliveTimeout = 65_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve(server);
    });
  });
}

export function serverUrl(server: Server): string {
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  return `http://${host}:${String(address.port)}`;
}
