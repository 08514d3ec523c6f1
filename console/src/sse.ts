// Server-sent events read from a fetch body (EventSource cannot send the
// Authorization header the API needs). An incremental parser of the
// text/event-stream format (HTML Living Standard, "Parsing an event
// stream"): chunks may split lines anywhere; a line ends at "\r\n", "\r"
// or "\n" (a "\r" ending a chunk ends its line at once, and a "\n"
// starting the next chunk is then skipped); a blank line ends a message;
// lines starting with ':' are comments (the API's "lagged: N reports
// lost" notices and keep-alives). Cost: linear in the bytes pushed; the
// buffer holds at most one unfinished line.

export interface SseMessage {
  event: string;
  data: string;
}

export class SseParser {
  private buf = "";
  private event = "";
  private data: string[] = [];
  private afterCr = false;

  constructor(
    private readonly onMessage: (m: SseMessage) => void,
    private readonly onComment: (text: string) => void,
  ) {}

  push(chunk: string): void {
    if (chunk === "") return;
    // A "\r" ending the previous chunk may be the first half of "\r\n": its "\n" is no new line.
    if (this.afterCr && chunk.startsWith("\n")) chunk = chunk.slice(1);
    this.afterCr = false;
    this.buf += chunk;
    for (;;) {
      const nl = this.buf.search(/\r\n|\r|\n/);
      if (nl < 0) return;
      const width = this.buf.startsWith("\r\n", nl) ? 2 : 1;
      const line = this.buf.slice(0, nl);
      if (width === 1 && this.buf[nl] === "\r" && nl === this.buf.length - 1) this.afterCr = true;
      this.buf = this.buf.slice(nl + width);
      this.line(line);
    }
  }

  private line(line: string): void {
    if (line === "") {
      if (this.data.length > 0) {
        this.onMessage({ event: this.event || "message", data: this.data.join("\n") });
      }
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) {
      this.onComment(line.slice(1).trimStart());
      return;
    }
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
  }
}
