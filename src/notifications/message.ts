// The bodies a receiver gets: the Generic Notification document (its schema is in
// docs/integrations.md), signed with HMAC-SHA256, and the Slack-compatible text. Pure.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { API_VERSION } from '../api/common.ts';
import type { NotificationFormat, NotificationStep } from '../api/notification-policy.ts';
import { redactURLs } from '../redact.ts';
import type { Subject } from './subject.ts';

/** One step of a subject, as a message carries it. */
export interface StepRecord {
  step: NotificationStep;
  /** The reason of the Event the step comes from (Requested, Approved, Succeeded, ...). */
  reason: string;
  message: string;
  /** Normal or Warning, as the Event. */
  type: 'Normal' | 'Warning';
  /** When the controller recorded it (RFC 3339). */
  time: string;
  /** The subject's last step. */
  final: boolean;
}

/** One delivery: the steps of one subject for one policy, oldest first. */
export interface Message {
  /** The same for every attempt of this delivery: receivers drop repeats by it. */
  id: string;
  policy: string;
  subject: Subject;
  steps: readonly StepRecord[];
  /** Steps of this subject dropped before this message (the queue was full). */
  dropped: number;
}

/** Header names of a Generic delivery. */
export const SIGNATURE_HEADER = 'X-Gatehouse-Signature';
export const TIMESTAMP_HEADER = 'X-Gatehouse-Timestamp';
export const DELIVERY_HEADER = 'X-Gatehouse-Delivery';

/** The Generic JSON document of a message. */
export function notificationDocument(m: Message): Record<string, unknown> {
  const s = m.subject;
  const about =
    s.kind === 'NodeAction'
      ? {
          action: {
            name: s.name,
            ...(s.uid ? { uid: s.uid } : {}),
            node: s.node,
            action: s.action,
            requestedBy: s.requestedBy,
            execution: s.execution,
            ...(s.rollout ? { rollout: s.rollout } : {}),
          },
        }
      : {
          rollout: {
            name: s.name,
            ...(s.uid ? { uid: s.uid } : {}),
            action: s.action,
            requestedBy: s.requestedBy,
            ...(s.node ? { node: s.node } : {}),
          },
        };
  return {
    apiVersion: API_VERSION,
    kind: 'Notification',
    id: m.id,
    policy: m.policy,
    ...about,
    steps: m.steps.map((r) => ({ ...r, message: redactURLs(r.message) })),
    ...(m.dropped > 0 ? { dropped: m.dropped } : {}),
  };
}

/** Slack's mrkdwn control characters, escaped as its API asks. */
function escapeSlack(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

const SLACK_MARK: Readonly<Record<NotificationStep, string>> = {
  Started: ':arrow_forward:',
  Held: ':pause_button:',
  Approved: ':white_check_mark:',
  Done: ':heavy_check_mark:',
  Failed: ':x:',
};

/** The Slack incoming-webhook body of a message: one line per step under a headline. */
export function slackBody(m: Message): { text: string } {
  const s = m.subject;
  const headline =
    s.kind === 'NodeAction'
      ? `*${s.action ?? 'Action'}* of node *${s.node ?? '?'}* (NodeAction ${s.name}, requested by ${s.requestedBy ?? '?'})`
      : `*${s.action ?? 'Rollout'}* rollout *${s.name}* (NodeRollout, requested by ${s.requestedBy ?? '?'})`;
  const lines = m.steps.map(
    (r) => `${SLACK_MARK[r.step]} *${r.step}* (${r.reason}): ${redactURLs(r.message)}`,
  );
  if (m.dropped > 0)
    lines.push(`_${String(m.dropped)} earlier step(s) were dropped: the receiver was too slow_`);
  return { text: escapeSlack([headline, ...lines].join('\n')) };
}

/** The body of a message in a format, as sent. */
export function messageBody(format: NotificationFormat, m: Message): string {
  return JSON.stringify(format === 'Slack' ? slackBody(m) : notificationDocument(m));
}

/**
 * The signature of a Generic delivery: HMAC-SHA256 over `<timestamp>.<body>`, hex, as
 * `sha256=<hex>`. The timestamp (Unix seconds) is signed with the body so that a
 * receiver can refuse a replayed delivery.
 *
 * @example signature('key', '1700000000', '{}') // 'sha256=…'
 */
export function signature(key: string, timestamp: string, body: string): string {
  return `sha256=${createHmac('sha256', key).update(`${timestamp}.${body}`).digest('hex')}`;
}

/**
 * What a receiver does: whether a delivery's signature is the key's, and its timestamp
 * within `toleranceSeconds` of `now` (default 5 minutes).
 */
export function verifySignature(
  key: string,
  headers: { timestamp: string | undefined; signature: string | undefined },
  body: string,
  now = Date.now(),
  toleranceSeconds = 300,
): boolean {
  const { timestamp, signature: given } = headers;
  if (!timestamp || !given || !/^\d+$/.test(timestamp)) return false;
  if (Math.abs(now / 1000 - Number(timestamp)) > toleranceSeconds) return false;
  const expected = Buffer.from(signature(key, timestamp, body));
  const actual = Buffer.from(given);
  return expected.length === actual.length && timingSafeEqual(expected, actual);
}
