// Finding a running daemon through its home directory (PROTOCOL.md §1).
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { DaemonInfoError, isRecord } from "./errors.js";
/**
 * defaultHome returns the home directory a daemon uses by default:
 * $TRELLIS_HOME, else ~/.trellis.
 */
export function defaultHome() {
    const env = process.env["TRELLIS_HOME"];
    return env !== undefined && env !== "" ? env : join(homedir(), ".trellis");
}
/**
 * readDaemonInfo reads `<home>/daemon.json` (home: the argument, else
 * $TRELLIS_HOME, else ~/.trellis) and returns the daemon's URL and token,
 * ready for `connect`. It fails with a DaemonInfoError when the file is
 * missing (no daemon runs there), names a process that is gone, or is not
 * valid.
 */
export async function readDaemonInfo(home) {
    const dir = resolve(home ?? defaultHome());
    const path = join(dir, "daemon.json");
    let text;
    try {
        text = await readFile(path, "utf8");
    }
    catch (err) {
        if (errnoCode(err) === "ENOENT") {
            throw new DaemonInfoError("missing", path, `no Trellis daemon is running for ${dir}: ${path} does not exist (start one with \`trellisd --home ${dir}\`)`, { cause: err });
        }
        throw new DaemonInfoError("invalid", path, `cannot read ${path}: ${err.message}`, { cause: err });
    }
    let raw;
    try {
        raw = JSON.parse(text);
    }
    catch (err) {
        throw new DaemonInfoError("invalid", path, `${path} is not valid JSON: ${err.message}`, { cause: err });
    }
    if (!isRecord(raw)) {
        throw new DaemonInfoError("invalid", path, `${path} does not hold a JSON object`);
    }
    const port = raw["port"];
    const token = raw["token"];
    const pid = raw["pid"];
    const problems = [];
    if (!isPort(port))
        problems.push(`"port" must be a port number, got ${JSON.stringify(port)}`);
    if (typeof token !== "string" || token === "")
        problems.push(`"token" must be a non-empty string`);
    if (typeof pid !== "number" || !Number.isInteger(pid) || pid <= 0)
        problems.push(`"pid" must be a positive integer, got ${JSON.stringify(pid)}`);
    if (problems.length > 0) {
        throw new DaemonInfoError("invalid", path, `${path} is not a valid daemon.json: ${problems.join("; ")}`);
    }
    if (!processExists(pid)) {
        throw new DaemonInfoError("stale", path, `no Trellis daemon is running for ${dir}: ${path} names process ${String(pid)}, which is gone (the daemon did not stop cleanly; start it again)`);
    }
    const tls = raw["tls"] === true;
    const tlsCert = typeof raw["tlsCert"] === "string" && raw["tlsCert"] !== "" ? raw["tlsCert"] : undefined;
    return {
        url: `${tls ? "wss" : "ws"}://127.0.0.1:${String(port)}/ws`,
        tls,
        ...(tlsCert !== undefined ? { tlsCert } : {}),
        token: token,
        port: port,
        grpcPort: typeof raw["grpcPort"] === "number" ? raw["grpcPort"] : 0,
        pid: pid,
        startedAt: typeof raw["startedAt"] === "string" ? raw["startedAt"] : "",
        protocolVersion: typeof raw["protocolVersion"] === "string" ? raw["protocolVersion"] : "",
        version: typeof raw["version"] === "string" ? raw["version"] : "",
        home: dir,
    };
}
function isPort(v) {
    return typeof v === "number" && Number.isInteger(v) && v > 0 && v < 65536;
}
// processExists asks the kernel whether pid runs (signal 0 sends nothing);
// EPERM means it runs under another user.
function processExists(pid) {
    try {
        process.kill(pid, 0);
        return true;
    }
    catch (err) {
        return errnoCode(err) === "EPERM";
    }
}
function errnoCode(err) {
    return isRecord(err) && typeof err["code"] === "string" ? err["code"] : undefined;
}
