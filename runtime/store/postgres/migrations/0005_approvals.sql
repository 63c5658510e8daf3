-- Scale-out: approval requests and approvers shared by every daemon
-- (docs/scale-out.md). A request is resolved once: the first UPDATE that
-- finds resolution IS NULL wins.

CREATE TABLE approvals (
	request_id  text COLLATE "C" PRIMARY KEY,
	session_id  text COLLATE "C" NOT NULL,
	origin      text COLLATE "C" NOT NULL DEFAULT '',
	owner_id    text COLLATE "C" NOT NULL,
	request     jsonb       NOT NULL,
	resolution  jsonb,
	created_at  timestamptz NOT NULL DEFAULT now(),
	resolved_at timestamptz
);
CREATE INDEX approvals_pending ON approvals (created_at, request_id) WHERE resolution IS NULL;
CREATE INDEX approvals_resolved ON approvals (resolved_at) WHERE resolution IS NOT NULL;

-- The daemon each origin's approver (an Attach stream) is connected to.
CREATE TABLE approvers (
	origin      text COLLATE "C" PRIMARY KEY,
	daemon_id   text COLLATE "C" NOT NULL,
	attached_at timestamptz NOT NULL DEFAULT now()
);
