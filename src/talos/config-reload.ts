// The controller's talosconfig file, followed while it runs. A Secret mounted as a volume
// changes in place: kubelet writes the new content to a fresh directory and swaps the
// volume's `..data` symlink to it — when Talos renews the client certificate, when an
// operator replaces it, and when an optional Secret is created after the pod started.
//
// The file is read every interval and compared by a hash of its content: fs.watch does
// not see a symlink swap reliably (it watches the inode it was given), and a hash also
// ignores rewrites that change nothing. A changed file that is valid and names other
// credentials replaces those in use; one that cannot be used is refused, with a warning,
// and the credentials in use are kept — a broken Secret must not stop a controller that
// still holds working ones.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from '../log.ts';
import { errorMessage } from '../wait.ts';
import {
  clientCertificate,
  parseTalosConfig,
  selectContext,
  type ClientCertificate,
  type TalosContext,
} from './config.ts';

/** How often the file is read; kubelet itself takes up to a minute or so to update a Secret volume. */
export const TALOSCONFIG_POLL_INTERVAL_MS = 15_000;
/** A client certificate closer than this to its end is warned about. */
export const CERTIFICATE_EXPIRY_WARNING_MS = 7 * 24 * 3_600_000;
/** How often the expiry warning is repeated while nothing changes. */
const EXPIRY_REMINDER_MS = 24 * 3_600_000;

export interface TalosConfigReloaderOptions {
  path: string;
  /** A context other than the file's current one. */
  context?: string;
  log: Logger;
  /** Default TALOSCONFIG_POLL_INTERVAL_MS. */
  intervalMs?: number;
  /** The clock the certificate's expiry is measured by (tests). */
  now?: () => Date;
}

export interface FollowOptions {
  /** Called with the new credentials each time they replace the ones in use. */
  onChange: (context: TalosContext) => void;
  /** Where the reload metrics are registered. */
  registry?: Registry;
}

interface ReloadMetrics {
  reloads: Counter<'result'>;
  lastSuccessful: Gauge;
  expiration: Gauge;
}

/** `3d4h` */
function days(ms: number): string {
  const hours = Math.max(0, Math.floor(ms / 3_600_000));
  return `${String(Math.floor(hours / 24))}d${String(hours % 24)}h`;
}

function sameCredentials(a: TalosContext, b: TalosContext): boolean {
  return (
    a.name === b.name &&
    a.ca === b.ca &&
    a.crt === b.crt &&
    a.key === b.key &&
    a.endpoints.join(',') === b.endpoints.join(',') &&
    a.nodes.join(',') === b.nodes.join(',')
  );
}

export class TalosConfigReloader {
  readonly path: string;
  private readonly o: TalosConfigReloaderOptions;
  private readonly intervalMs: number;
  private inUse: { context: TalosContext; certificate: ClientCertificate } | undefined;
  /** The hash of what was last read ('absent' when there was no file), used or not. */
  private seen: string | undefined;
  private refused: string | undefined;
  private following: FollowOptions | undefined;
  private metrics: ReloadMetrics | undefined;
  private timer: NodeJS.Timeout | undefined;
  private reading: Promise<boolean> | undefined;
  private expiryWarnedAt = 0;

  constructor(options: TalosConfigReloaderOptions) {
    this.o = options;
    this.path = options.path;
    this.intervalMs = options.intervalMs ?? TALOSCONFIG_POLL_INTERVAL_MS;
  }

  /** The credentials in use; undefined until the file has existed with a usable context. */
  get current(): TalosContext | undefined {
    return this.inUse?.context;
  }

  /** Why the file as it is now is not in use (the credentials before it are), if it is not. */
  get rejected(): string | undefined {
    return this.refused;
  }

  /**
   * The first read, before the controller starts: the context, or undefined when the
   * file does not exist (yet). Throws when it exists and cannot be used — at start there
   * are no credentials to fall back on, and a mistake is best shown at once.
   */
  async load(): Promise<TalosContext | undefined> {
    const text = await this.read();
    this.seen = this.fingerprint(text);
    if (text === undefined) return undefined;
    this.use(this.parse(text), 'Talos executor on');
    return this.current;
  }

  /**
   * Reads the file again and, if it changed and can be used, switches to it. Never
   * throws: a file that cannot be used is logged and the credentials in use are kept.
   * Resolves to whether the credentials changed.
   */
  reload(): Promise<boolean> {
    // Overlapping reads (a test's reload() during a poll) would report one change twice.
    this.reading ??= this.readAgain().finally(() => {
      this.reading = undefined;
    });
    return this.reading;
  }

  /** Polls the file until stop(), telling `onChange` of every new context. */
  start(options: FollowOptions): void {
    if (this.following) throw new Error(`talosconfig ${this.path} is already followed`);
    this.following = options;
    if (options.registry) this.metrics = this.register(options.registry);
    if (this.inUse) this.metrics?.expiration.set(this.inUse.certificate.notAfter.getTime() / 1000);
    this.metrics?.lastSuccessful.set(this.refused === undefined ? 1 : 0);
    const tick = () => {
      this.timer = setTimeout(() => {
        this.reload()
          .catch((error: unknown) => {
            // Only the listener can throw here; the next change is tried all the same.
            this.o.log.error(
              { talosconfig: this.path, err: errorMessage(error) },
              'talosconfig reload failed',
            );
            return false;
          })
          .finally(() => {
            if (this.timer) tick();
          });
      }, this.intervalMs);
      // The controller's server keeps the process alive; this timer alone should not.
      this.timer.unref();
    };
    tick();
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  // --- plumbing ---------------------------------------------------------------------

  private async readAgain(): Promise<boolean> {
    let text: string | undefined;
    let unreadable: string | undefined;
    try {
      text = await this.read();
    } catch (error) {
      unreadable = errorMessage(error);
    }
    const hash = this.fingerprint(text, unreadable);
    if (hash === this.seen) {
      this.warnIfExpiring();
      return false;
    }
    this.seen = hash;
    if (unreadable !== undefined) return this.refuse(unreadable);
    if (text === undefined) {
      if (this.inUse) return this.refuse(`talosconfig ${this.path} is gone`);
      this.refused = undefined;
      this.metrics?.lastSuccessful.set(1);
      return false;
    }
    let next: { context: TalosContext; certificate: ClientCertificate };
    try {
      next = this.parse(text);
    } catch (error) {
      return this.refuse(errorMessage(error));
    }
    const recovered = this.refused !== undefined;
    this.refused = undefined;
    this.metrics?.lastSuccessful.set(1);
    if (this.inUse && sameCredentials(this.inUse.context, next.context)) {
      // Rewritten, or back to what is in use, or another context of the file changed.
      const message = 'talosconfig changed; the credentials it gives are those in use';
      if (recovered) this.o.log.info({ talosconfig: this.path }, message);
      else this.o.log.debug({ talosconfig: this.path }, message);
      return false;
    }
    this.use(
      next,
      this.inUse
        ? 'Talos executor on new credentials: the talosconfig changed (calls in flight finish on the old ones)'
        : 'Talos executor on: the talosconfig appeared',
    );
    this.metrics?.reloads.inc({ result: 'applied' });
    this.following?.onChange(next.context);
    return true;
  }

  private async read(): Promise<string | undefined> {
    try {
      return await readFile(this.path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new Error(`cannot read talosconfig ${this.path}: ${errorMessage(error)}`, { cause: error });
    }
  }

  private fingerprint(text: string | undefined, readError?: string): string {
    if (readError !== undefined) return `unreadable: ${readError}`;
    return text === undefined ? 'absent' : createHash('sha256').update(text).digest('hex');
  }

  /** The context, checked as far as can be without calling Talos; throws TalosConfigError. */
  private parse(text: string): { context: TalosContext; certificate: ClientCertificate } {
    const context = selectContext(parseTalosConfig(text, this.path), this.path, this.o.context);
    return { context, certificate: clientCertificate(context) };
  }

  private use(next: { context: TalosContext; certificate: ClientCertificate }, message: string): void {
    this.inUse = next;
    this.expiryWarnedAt = 0;
    const { context, certificate } = next;
    this.o.log.info(
      {
        talosconfig: this.path,
        context: context.name,
        endpoints: context.endpoints,
        certificate: {
          subject: certificate.subject,
          roles: certificate.roles,
          notAfter: certificate.notAfter.toISOString(),
        },
      },
      message,
    );
    this.metrics?.expiration.set(certificate.notAfter.getTime() / 1000);
    this.warnIfExpiring();
  }

  /** Told once per change of the file: the polls after it read the same hash. */
  private refuse(problem: string): false {
    this.refused = problem;
    this.metrics?.reloads.inc({ result: 'rejected' });
    this.metrics?.lastSuccessful.set(0);
    this.o.log.warn(
      { talosconfig: this.path, problem, context: this.inUse?.context.name },
      this.inUse
        ? 'talosconfig changed but cannot be used: the Talos executor keeps the credentials it has'
        : 'talosconfig appeared but cannot be used: Managed actions are still approved but not performed',
    );
    return false;
  }

  private warnIfExpiring(): void {
    if (!this.inUse) return;
    const now = (this.o.now?.() ?? new Date()).getTime();
    const notAfter = this.inUse.certificate.notAfter;
    const left = notAfter.getTime() - now;
    if (left > CERTIFICATE_EXPIRY_WARNING_MS || now - this.expiryWarnedAt < EXPIRY_REMINDER_MS) return;
    this.expiryWarnedAt = now;
    const fields = { talosconfig: this.path, notAfter: notAfter.toISOString() };
    if (left <= 0)
      this.o.log.warn(
        fields,
        'the Talos client certificate has expired: Talos refuses it, and Managed actions fail until the talosconfig is renewed',
      );
    else
      this.o.log.warn(
        fields,
        `the Talos client certificate expires in ${days(left)}: renew the talosconfig (gatehouse picks it up without a restart)`,
      );
  }

  private register(registry: Registry): ReloadMetrics {
    return {
      reloads: new Counter({
        name: 'gatehouse_talosconfig_reloads_total',
        help: 'Changes of the talosconfig file read while running, by result: applied, or rejected (the credentials in use were kept).',
        labelNames: ['result'],
        registers: [registry],
      }),
      lastSuccessful: new Gauge({
        name: 'gatehouse_talosconfig_last_reload_successful',
        help: 'Whether the talosconfig file, as it is now, is the one in use (0: its latest change was rejected).',
        registers: [registry],
      }),
      expiration: new Gauge({
        name: 'gatehouse_talos_client_certificate_expiration_timestamp_seconds',
        help: "The end of validity (notAfter) of the talosconfig's client certificate in use, as a Unix time.",
        registers: [registry],
      }),
    };
  }
}
