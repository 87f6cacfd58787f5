// What every probe type implements. A probe looks at the world and says whether a
// check holds; it never changes anything (checks are impact-free by contract).
import {
  PROBES,
  type ClusterHealthCheckSpec,
  type ProbeName,
  type ProbeSpecs,
} from '../api/cluster-health-check.ts';
import type { RestClient } from '../kube/rest.ts';
import type { NodeTarget } from './node-target.ts';

export interface ProbeResult {
  healthy: boolean;
  /** What was found, in words an operator can act on: the failure, or what held. */
  message: string;
}

export interface ProbeContext {
  /** The Kubernetes API, as the controller's own identity. */
  rest: RestClient;
  /** Aborted when the check's timeout runs out; probes pass it to every I/O call. */
  signal: AbortSignal;
  /**
   * How a Service reference becomes a host and port. `dns` (in a cluster): the
   * Service's DNS name. `endpoints` (a controller outside the cluster, e.g. in the
   * sandbox): a ready endpoint from its EndpointSlices, or an ExternalName's host.
   */
  serviceResolution: 'dns' | 'endpoints';
  /** The controller's own namespace: where Secrets a probe reads (credentials) live. */
  namespace: string;
  /**
   * When the evaluation was asked for (performance.now()): the latest gate's request, or
   * the probe's own start. Reads sent since then are as fresh as this evaluation needs,
   * so identical lists of several checks are made once (RestRequest.sharedSince).
   */
  readsSince?: number;
  /** The node a Node-scoped check is evaluated for; undefined for a Cluster-scoped one. */
  node?: NodeTarget;
  /** The check being probed, and its timeout (a checker Job's deadline). */
  check?: CheckIdentity & { timeoutMs: number };
  /** Runs checker Jobs (src/checks/checker-jobs.ts); absent on a replica that may not create them (only the leader does). */
  jobs?: CheckerJobRunner;
}

/** The check a probe runs for (a checker Job's name and owner). */
export interface CheckIdentity {
  name: string;
  uid: string;
  generation: number;
}

/** One run of a check's checker Job. */
export interface CheckerJobRun {
  check: CheckIdentity;
  node: NodeTarget | undefined;
  timeoutMs: number;
  signal: AbortSignal;
}

export interface CheckerJobRunner {
  run(spec: ProbeSpecs['job'], run: CheckerJobRun): Promise<ProbeResult>;
}

/** A probe of one type; S is that probe's part of ClusterHealthCheck.spec. */
export type Probe<S> = (spec: S, context: ProbeContext) => Promise<ProbeResult>;

/** The probe type a spec sets; `none` only for a spec the API server should have refused. */
export function probeTypeOf(spec: ClusterHealthCheckSpec): ProbeName | 'none' {
  return PROBES.find((p) => spec[p] !== undefined) ?? 'none';
}
