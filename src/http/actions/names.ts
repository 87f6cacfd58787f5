// Which names the actions API accepts, and the names it gives the NodeActions it creates.

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

export function isActionName(name: string): boolean {
  return name.length <= 253 && DNS_SUBDOMAIN.test(name);
}

/**
 * `<node>-<action>-` (a generateName prefix), or with a suffix a full name. The node is
 * shortened so the name stays within 253 characters and ends in a letter or digit.
 */
export function actionNamePrefix(nodeName: string, action: string, suffixLength: number): string {
  const tail = `-${action.toLowerCase()}-`;
  const node = nodeName.slice(0, 253 - tail.length - suffixLength).replace(/[-.]+$/, '');
  return `${node}${tail}`;
}
