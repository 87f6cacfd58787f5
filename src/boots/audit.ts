// The unplanned-disruption audit, pure: what went around the gate. A node that booted
// (a new boot ID) with no gatehouse action in flight, that runs another Talos version
// than anything asked for (Talos's own fallback after a failed upgrade, or an upgrade
// made straight at apid), or that stayed NotReady longer than `notReadyAfterMs` while no
// action was disrupting it, is an UnplannedDisruption. What the audit has seen of a
// node is kept on the Node (AUDIT_ANNOTATION), so a restarted or failed-over controller
// neither misses a boot nor reports one twice; a node seen for the first time is
// recorded, never reported, and so is a NotReady spell it was already in.
import type { Action } from '../api/common.ts';
import type { NodeActionPhase } from '../api/node-action.ts';
import { APPROVED_PHASES } from '../api/phases.ts';
import type { EventSpec } from '../kube/event-spec.ts';
import { installerVersion, formatTalosVersion, talosVersionFromOsImage } from '../talos/version.ts';

/** The audit's record on the Node: the boot and version it last saw, and the NotReady spell it reported. */
export const AUDIT_ANNOTATION = 'talos.dev/audit';
export const UNPLANNED_DISRUPTION_REASON = 'UnplannedDisruption';

export const DISRUPTION_KINDS = ['boot', 'version-change', 'not-ready'] as const;
export type DisruptionKind = (typeof DISRUPTION_KINDS)[number];

export interface AuditRecord {
  bootID: string;
  osImage: string;
  /** The Ready condition's lastTransitionTime of the NotReady spell already reported. */
  notReadyReported?: string;
  /** The last unplanned disruption, for the dashboard. */
  last?: { kind: DisruptionKind; at: string };
}

/** What the audit needs of one of the node's NodeActions (any controller instance's). */
export interface AuditAction {
  name: string;
  action: Action;
  phase?: NodeActionPhase | undefined;
  bootIDAfter?: string | undefined;
  /** An Upgrade's installer image. */
  image?: string | undefined;
}

export interface AuditInput {
  now: Date;
  node: {
    name: string;
    bootID: string | undefined;
    osImage: string;
    ready: boolean;
    /** When the node went NotReady (its Ready condition's lastTransitionTime), while it is. */
    notReadySince?: string | undefined;
  };
  record: AuditRecord | undefined;
  actions: readonly AuditAction[];
  notReadyAfterMs: number;
}

export interface Disruption {
  kind: DisruptionKind;
  event: EventSpec;
}

export interface AuditDecision {
  /** The record to write (conditionally), when it changes; disruptions count only once it is written. */
  record?: AuditRecord;
  disruptions: Disruption[];
  /** Look again then (a NotReady spell not yet long enough). */
  requeueAfterMs?: number;
}

const event = (message: string): EventSpec => ({
  type: 'Warning',
  reason: UNPLANNED_DISRUPTION_REASON,
  message,
});

/** An action that explains a disruption of its node now: approved and unfinished, or the one whose boot this is. */
function explaining(input: AuditInput): AuditAction | undefined {
  const bootID = input.node.bootID;
  return (
    input.actions.find((a) => bootID !== undefined && a.bootIDAfter === bootID) ??
    input.actions.find((a) => a.phase !== undefined && APPROVED_PHASES.has(a.phase))
  );
}

/**
 * What the audit records and reports for one node.
 *
 * @example auditNode({now, node: {name: 'w1', bootID: 'b2', osImage: 'Talos (v1.13.0)', ready: true},
 *   record: {bootID: 'b1', osImage: 'Talos (v1.13.0)'}, actions: [], notReadyAfterMs: 120_000})
 *   // one 'boot' disruption, and the record moved to b2
 */
export function auditNode(input: AuditInput): AuditDecision {
  const { node, record, now } = input;
  if (!node.bootID) return { disruptions: [] };
  // First sight: what the node is now is where the audit starts, a NotReady spell already
  // under way included — it began before gatehouse watched, so nothing went around the gate.
  if (!record)
    return {
      record: {
        bootID: node.bootID,
        osImage: node.osImage,
        ...(!node.ready && node.notReadySince ? { notReadyReported: node.notReadySince } : {}),
      },
      disruptions: [],
    };
  const disruptions: Disruption[] = [];
  const next: AuditRecord = { ...record };
  const cause = explaining(input);
  if (node.bootID !== record.bootID) {
    next.bootID = node.bootID;
    if (!cause)
      disruptions.push({
        kind: 'boot',
        event: event(
          `node ${node.name} booted (boot ID ${record.bootID} → ${node.bootID}) with no gatehouse action in flight: it was rebooted around the gate (talosctl straight at apid, a power loss, a crash)`,
        ),
      });
  }
  if (node.osImage !== record.osImage) {
    next.osImage = node.osImage;
    const running = talosVersionFromOsImage(node.osImage);
    const asked = cause?.action === 'Upgrade' && cause.image ? installerVersion(cause.image) : undefined;
    const planned =
      running !== undefined &&
      asked !== undefined &&
      formatTalosVersion(asked) === formatTalosVersion(running);
    if (!planned)
      disruptions.push({
        kind: 'version-change',
        event: event(
          `node ${node.name} runs ${node.osImage || 'an unknown version'} (was ${record.osImage || 'unknown'}), which no gatehouse action asked for: ${
            asked
              ? `NodeAction ${cause?.name ?? ''} asked for ${formatTalosVersion(asked)} — Talos fell back after a failed upgrade`
              : 'an upgrade made around the gate, or Talos falling back'
          }`,
        ),
      });
  }
  let requeueAfterMs: number | undefined;
  if (!node.ready && node.notReadySince && next.notReadyReported !== node.notReadySince && !cause) {
    const since = Date.parse(node.notReadySince);
    const left = since + input.notReadyAfterMs - now.getTime();
    if (Number.isFinite(since) && left <= 0) {
      next.notReadyReported = node.notReadySince;
      disruptions.push({
        kind: 'not-ready',
        event: event(
          `node ${node.name} has been NotReady since ${node.notReadySince} (over ${String(Math.round(input.notReadyAfterMs / 1000))}s) with no gatehouse action disrupting it`,
        ),
      });
    } else if (Number.isFinite(since)) requeueAfterMs = left + 100;
  }
  const last = disruptions.at(-1);
  if (last) next.last = { kind: last.kind, at: now.toISOString() };
  const changed = JSON.stringify(next) !== JSON.stringify(record);
  return {
    ...(changed ? { record: next } : {}),
    disruptions,
    ...(requeueAfterMs !== undefined ? { requeueAfterMs } : {}),
  };
}

export function readAuditRecord(annotations: Record<string, string> | undefined): AuditRecord | undefined {
  const text = annotations?.[AUDIT_ANNOTATION];
  if (!text) return undefined;
  try {
    const parsed = JSON.parse(text) as Partial<AuditRecord>;
    return typeof parsed.bootID === 'string' && typeof parsed.osImage === 'string'
      ? (parsed as AuditRecord)
      : undefined;
  } catch {
    return undefined;
  }
}
