// For tests: a WebSocket the test drives (ApiClient's webSocketImpl): it
// opens, acks and closes each one.
export class FakeWS {
  static all: FakeWS[] = [];
  static CONNECTING = 0;
  static OPEN = 1;
  static CLOSING = 2;
  static CLOSED = 3;
  readyState = 0;
  protocol = 'graphql-transport-ws';
  onopen: ((e: unknown) => void) | null = null;
  onclose: ((e: unknown) => void) | null = null;
  onerror: ((e: unknown) => void) | null = null;
  onmessage: ((e: { data: string }) => void) | null = null;
  sent: string[] = [];
  url: string;
  constructor(url: string) {
    this.url = url;
    FakeWS.all.push(this);
  }
  send(d: string) {
    this.sent.push(d);
  }
  close() {
    // A client-initiated close completes when the server's close frame comes back.
    this.readyState = 2;
  }
  // test controls
  open() {
    this.readyState = 1;
    this.onopen?.({});
  }
  ack() {
    this.onmessage?.({ data: JSON.stringify({ type: 'connection_ack' }) });
  }
  closed(code = 1000) {
    this.readyState = 3;
    this.onclose?.({ code, reason: 'Normal Closure', wasClean: true });
  }
}
