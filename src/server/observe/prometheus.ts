/**
 * The Prometheus text exposition (format 0.0.4) of the three kinds of metric /metrics exports,
 * written as prom-client wrote it (family order, series in the order first counted, `le` first).
 * A series is an object found once and counted with a `+=`: no label hashing per request, and
 * nothing of a client library's push gateway, cluster or default collectors loaded.
 */
export const prometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

interface Family {
  /** Appends the family's HELP, TYPE and sample lines. */
  write(lines: string[]): void;
}

export class Registry {
  readonly contentType = prometheusContentType;
  private readonly families: Family[] = [];

  add<T extends Family>(family: T): T {
    this.families.push(family);
    return family;
  }

  metrics(): string {
    return `${this.families
      .map((family) => {
        const lines: string[] = [];
        family.write(lines);
        return lines.join("\n");
      })
      .join("\n\n")}\n`;
  }
}

const escapeText = (text: string) => text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
const escapeLabel = (value: string) => escapeText(value).replace(/"/g, '\\"');

/** `a="x",b="y"`: the inside of a series' braces. */
function labelText(names: readonly string[], values: readonly string[]): string {
  return names.map((name, i) => `${name}="${escapeLabel(values[i] ?? "")}"`).join(",");
}

function header(lines: string[], name: string, help: string, type: string): void {
  lines.push(`# HELP ${name} ${escapeText(help)}`, `# TYPE ${name} ${type}`);
}

/** Series by their label values; one appears once first counted, as in prom-client. */
abstract class Labelled<S extends { labels: string }> implements Family {
  private readonly byValues = new Map<string, S>();
  protected readonly counted: S[] = [];

  constructor(
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly string[],
  ) {}

  labels(...values: string[]): S {
    const key = values.join("\u0000");
    let series = this.byValues.get(key);
    if (!series) {
      series = this.create(labelText(this.labelNames, values), () => this.counted.push(series!));
      this.byValues.set(key, series);
    }
    return series;
  }

  protected abstract create(labels: string, appear: () => void): S;
  abstract write(lines: string[]): void;
}

export class CounterSeries {
  private value = 0;
  private appear: (() => void) | undefined;

  constructor(
    readonly labels: string,
    appear: () => void,
  ) {
    this.appear = appear;
  }

  /** A counter only goes up: anything but a finite amount above zero leaves it as it is. */
  inc(by = 1): void {
    if (!(by > 0 && Number.isFinite(by))) return;
    this.appear?.();
    this.appear = undefined;
    this.value += by;
  }

  get total(): number {
    return this.value;
  }
}

export class Counter extends Labelled<CounterSeries> {
  protected create(labels: string, appear: () => void): CounterSeries {
    return new CounterSeries(labels, appear);
  }

  write(lines: string[]): void {
    header(lines, this.name, this.help, "counter");
    for (const s of this.counted)
      lines.push(`${this.name}${s.labels ? `{${s.labels}}` : ""} ${s.total}`);
  }
}

export class HistogramSeries {
  /** Observations per bucket (not cumulative), the last one past every bound. */
  readonly counts: number[];
  sum = 0;
  count = 0;
  private appear: (() => void) | undefined;

  constructor(
    readonly labels: string,
    private readonly bounds: readonly number[],
    appear: () => void,
  ) {
    this.counts = new Array<number>(bounds.length + 1).fill(0);
    this.appear = appear;
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    this.appear?.();
    this.appear = undefined;
    let at = 0;
    while (at < this.bounds.length && value > this.bounds[at]!) at++;
    this.counts[at]!++;
    this.sum += value;
    this.count++;
  }
}

export class Histogram extends Labelled<HistogramSeries> {
  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly bounds: readonly number[],
  ) {
    super(name, help, labelNames);
  }

  protected create(labels: string, appear: () => void): HistogramSeries {
    return new HistogramSeries(labels, this.bounds, appear);
  }

  write(lines: string[]): void {
    header(lines, this.name, this.help, "histogram");
    for (const s of this.counted) {
      const rest = s.labels ? `,${s.labels}` : "";
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += s.counts[i]!;
        lines.push(`${this.name}_bucket{le="${bound}"${rest}} ${cumulative}`);
      });
      lines.push(`${this.name}_bucket{le="+Inf"${rest}} ${s.count}`);
      const own = s.labels ? `{${s.labels}}` : "";
      lines.push(`${this.name}_sum${own} ${s.sum}`, `${this.name}_count${own} ${s.count}`);
    }
  }
}

/** A gauge read when scraped. */
export class Gauge implements Family {
  constructor(
    readonly name: string,
    readonly help: string,
    private readonly read: () => number,
  ) {}

  write(lines: string[]): void {
    header(lines, this.name, this.help, "gauge");
    lines.push(`${this.name} ${this.read()}`);
  }
}
