// The query parameters of the actions API: ?phase= and ?wait=.
import { NODE_ACTION_PHASES, type NodeActionPhase } from '../../api/node-action.ts';
import { formatDuration, parseDuration } from '../../duration.ts';

import { ApiError } from '../api-error.ts';

export function parsePhase(value: string | null, parameter: string): NodeActionPhase | undefined {
  if (value === null) return undefined;
  if (!(NODE_ACTION_PHASES as readonly string[]).includes(value)) {
    throw new ApiError(400, `?${parameter}= must be one of ${NODE_ACTION_PHASES.join(', ')}, not "${value}"`);
  }
  return value as NodeActionPhase;
}

const WAIT_PATTERN = /^([0-9]{1,6}(ms|s|m))+$/;

export function parseWait(value: string | null, maxMs: number): number {
  if (value === null) return 0;
  const bounds = `from 0s to ${formatDuration(maxMs)}`;
  if (!WAIT_PATTERN.test(value)) {
    throw new ApiError(
      400,
      `?wait= must be a duration such as 30s or 500ms (${bounds}), not "${value.slice(0, 40)}"`,
    );
  }
  const ms = parseDuration(value);
  if (ms > maxMs) throw new ApiError(400, `?wait= must be ${bounds}, not ${value}`);
  return ms;
}
