// What the CLI needs from gatehouse, whichever way it talks to it: straight to the
// Kubernetes API with a kubeconfig (kube-backend.ts), or to the controller's HTTP API
// with a bearer token (http-backend.ts). Commands only ever see this interface.
import type { ActionObject } from '../api/node-action.ts';
import type { NodeActionSpec } from '../api/node-action.ts';
import type { KubeObject } from '../kube/informer.ts';
import type { CheckSummary, NodeView } from '../http/schemas.ts';

export type { ActionObject, CheckSummary, NodeView };

export type RequestSpec = Omit<NodeActionSpec, 'requestedBy'>;

export type PolicyObject = KubeObject & {
  spec?: { maxConcurrent?: number | string; actions?: string[] };
  status?: {
    matchingNodes?: number;
    allowedConcurrent?: number;
    activeActions?: number;
    windowOpen?: boolean;
    nextWindowStart?: string;
  };
};

/** One observation of an action being followed; `action` undefined once it is deleted. */
export interface Progress {
  action: ActionObject | undefined;
  node: NodeView | undefined;
}

export interface CreateOptions {
  /** With the HTTP API: makes a retried request return the same action. With a kubeconfig: recorded. */
  idempotencyKey?: string;
  /**
   * With a kubeconfig: the action's name instead of a generated one. If an action of that
   * name exists, it is returned as it is: the caller checks that it is the same request.
   */
  name?: string;
  /** With a kubeconfig: a file to hand to a Managed ConfigChange through a Secret. */
  configFile?: { content: Buffer; namespace: string };
}

export interface Backend {
  /** Where the CLI is talking to, for messages: "cluster https://..." or "gatehouse API http://...". */
  readonly target: string;
  readonly mode: 'kubernetes' | 'http';
  /** The caller's user name as the API server knows it. */
  whoami(): Promise<string>;
  checks(): Promise<CheckSummary[]>;
  /**
   * One check: with the HTTP API a fresh probe by the controller; with a kubeconfig the
   * state the controller last recorded in its status. Undefined if there is no such check.
   */
  /** interval: the check's probe interval, when the summary is as recorded (not fresh). */
  check(
    name: string,
    node?: string,
  ): Promise<{ summary: CheckSummary; fresh: boolean; interval?: string } | undefined>;
  policies(): Promise<PolicyObject[]>;
  actions(): Promise<ActionObject[]>;
  action(name: string): Promise<ActionObject | undefined>;
  /** What is known of a node; `exists: false` when there is no such Node (or it cannot be told). */
  node(name: string): Promise<NodeView | undefined>;
  /**
   * The name of the Node whose name, InternalIP or Hostname address is `address`
   * (talosctl's -n), undefined if there is none. Absent where nodes cannot be listed (the HTTP API).
   */
  nodeNamed?(address: string): Promise<string | undefined>;
  createAction(spec: RequestSpec, options?: CreateOptions): Promise<ActionObject>;
  /** Cancels (deletes) an unfinished action; throws a CliError if it has already ended. */
  cancel(name: string): Promise<void>;
  markExecuted(name: string): Promise<ActionObject>;
  /** Releases a Maintenance held out of service (talos.dev/released); harmless when it already is. */
  release(name: string): Promise<ActionObject>;
  /**
   * Answers the approval hook the action waits for (Approve, or Refuse: it ends Denied), in
   * the caller's name, with their reason; throws a CliError naming the rule that refuses it.
   */
  approve(name: string, decision: 'Approve' | 'Refuse', reason: string): Promise<ActionObject>;
  /**
   * Calls `onProgress` with the action and its node whenever either changes, until the
   * action is final or deleted, `until` says stop, or `signal` aborts (then rejects with
   * its reason). Every phase the action went through is seen, in order, however short.
   */
  follow(
    name: string,
    onProgress: (progress: Progress) => void,
    options: { until?: (progress: Progress) => boolean; signal?: AbortSignal },
  ): Promise<Progress>;
}
