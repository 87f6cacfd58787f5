// What every probe type implements. A probe looks at the world and says whether a
// check holds; it never changes anything (checks are impact-free by contract).
import {
  PROBES,
  type ClusterHealthCheckSpec,
  type ProbeName,
  type ProbeSpecs,
} from '../api/cluster-health-check.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { LabelSelector } from '../kube/labels.ts';
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
  /**
   * Present for periodic probes only: what they may read instead of a consistent read
   * (docs/decisions.md, "Requests per probe"). Absent — a gate's fresh evaluation, an
   * operator's "evaluate now", any caller that did not ask — every read is consistent.
   */
  cached?: CachedReads;
  /** The node a Node-scoped check is evaluated for; undefined for a Cluster-scoped one. */
  node?: NodeTarget;
  /** The check being probed, and its timeout (a checker Job's deadline). */
  check?: CheckIdentity & { timeoutMs: number };
  /** Runs checker Jobs (src/checks/checker-jobs.ts); absent on a replica that may not create them (only the leader does). */
  jobs?: CheckerJobRunner;
}

/**
 * Reads a periodic probe may take from caches. Lists and gets then ask for
 * resourceVersion=0 — any version the API server's watch cache holds, without reading
 * etcd or waiting for the cache to catch up — and Nodes come from the controller's own cache.
 */
export interface CachedReads {
  /**
   * The controller's Nodes that a valid label selector selects (all, without one), or
   * undefined while its Node watch is not live (ask the API server then).
   */
  nodes(selector: LabelSelector | undefined): readonly KubeObject[] | undefined;
}

/**
 * resourceVersion=0 for a read that may be answered from the API server's watch cache at
 * whatever version it holds (no etcd read, no wait); nothing, for a consistent read.
 */
export function consistency(cached: boolean | undefined): { resourceVersion?: string } {
  return cached ? { resourceVersion: '0' } : {};
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
