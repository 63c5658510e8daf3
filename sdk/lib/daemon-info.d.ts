/** DaemonInfo is daemon.json plus what a client needs to connect. */
export interface DaemonInfo {
    /** The WebSocket URL: `ws://127.0.0.1:<port>/ws`, or `wss://` when the daemon serves TLS. */
    url: string;
    /** True when the daemon's ports serve TLS only (started with --tls-cert). */
    tls: boolean;
    /**
     * The daemon's certificate file (daemon.json's `tlsCert`), which a local
     * client trusts for `wss://` (connect({home}) reads it); absent without TLS.
     */
    tlsCert?: string;
    /** The auth token for system.hello. */
    token: string;
    /** The HTTP/WebSocket port. */
    port: number;
    /** The internal gRPC port. */
    grpcPort: number;
    /** The daemon's process id. */
    pid: number;
    /** When the daemon started (RFC3339 UTC). */
    startedAt: string;
    /** The protocol version the daemon speaks. */
    protocolVersion: string;
    /** The daemon's own version. */
    version: string;
    /** The home directory daemon.json was read from. */
    home: string;
}
/**
 * defaultHome returns the home directory a daemon uses by default:
 * $TRELLIS_HOME, else ~/.trellis.
 */
export declare function defaultHome(): string;
/**
 * readDaemonInfo reads `<home>/daemon.json` (home: the argument, else
 * $TRELLIS_HOME, else ~/.trellis) and returns the daemon's URL and token,
 * ready for `connect`. It fails with a DaemonInfoError when the file is
 * missing (no daemon runs there), names a process that is gone, or is not
 * valid.
 */
export declare function readDaemonInfo(home?: string): Promise<DaemonInfo>;
