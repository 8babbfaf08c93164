CREATE TABLE "audit" (
	"tenant_id" text NOT NULL,
	"seq" bigint NOT NULL,
	"id" text NOT NULL,
	"at" timestamp (3) with time zone NOT NULL,
	"event" text NOT NULL,
	"decision" text NOT NULL,
	"reason_code" text,
	"capability_id" text,
	"parent_id" text,
	"trajectory_id" text,
	"op" text,
	"target" jsonb,
	"cost" numeric(39, 0),
	"call_id" text,
	"detail" jsonb,
	"prev_hash" text NOT NULL,
	"hash" text NOT NULL,
	CONSTRAINT "audit_tenant_id_seq_pk" PRIMARY KEY("tenant_id","seq"),
	CONSTRAINT "audit_id_unique" UNIQUE("id")
);
--> statement-breakpoint
CREATE TABLE "audit_heads" (
	"tenant_id" text PRIMARY KEY NOT NULL,
	"seq" bigint NOT NULL,
	"hash" text NOT NULL,
	"last_id" text
);
--> statement-breakpoint
CREATE TABLE "capabilities" (
	"id" text PRIMARY KEY NOT NULL,
	"tenant_id" text NOT NULL,
	"trajectory_id" text NOT NULL,
	"parent_id" text,
	"ancestors" text[] NOT NULL,
	"depth" integer NOT NULL,
	"rights" text[] NOT NULL,
	"objects" jsonb NOT NULL,
	"predicate" jsonb NOT NULL,
	"budget" numeric(39, 0),
	"max_calls" bigint,
	"spent" numeric(39, 0) DEFAULT '0' NOT NULL,
	"calls" bigint DEFAULT 0 NOT NULL,
	"kid" text NOT NULL,
	"issued_at" timestamp (3) with time zone NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL,
	"revoked_at" timestamp (3) with time zone,
	"revoke_reason" text,
	CONSTRAINT "capabilities_spent_ck" CHECK ("capabilities"."budget" IS NULL OR "capabilities"."spent" <= "capabilities"."budget"),
	CONSTRAINT "capabilities_calls_ck" CHECK ("capabilities"."max_calls" IS NULL OR "capabilities"."calls" <= "capabilities"."max_calls")
);
--> statement-breakpoint
CREATE TABLE "idempotency" (
	"tenant_id" text NOT NULL,
	"scope" text NOT NULL,
	"key" text NOT NULL,
	"request_hash" text NOT NULL,
	"state" text NOT NULL,
	"owner" text NOT NULL,
	"claimed_at" timestamp (3) with time zone NOT NULL,
	"status" integer,
	"response" jsonb,
	CONSTRAINT "idempotency_tenant_id_scope_key_pk" PRIMARY KEY("tenant_id","scope","key"),
	CONSTRAINT "idempotency_state_ck" CHECK ("idempotency"."state" IN ('in_flight', 'completed', 'in_doubt'))
);
--> statement-breakpoint
CREATE TABLE "tenants" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"key_id" text NOT NULL,
	"key_hash" text NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	CONSTRAINT "tenants_name_unique" UNIQUE("name"),
	CONSTRAINT "tenants_key_id_unique" UNIQUE("key_id")
);
--> statement-breakpoint
ALTER TABLE "audit_heads" ADD CONSTRAINT "audit_heads_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "capabilities" ADD CONSTRAINT "capabilities_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "audit_capability_idx" ON "audit" USING btree ("tenant_id","capability_id","seq");--> statement-breakpoint
CREATE INDEX "audit_trajectory_idx" ON "audit" USING btree ("tenant_id","trajectory_id","seq");--> statement-breakpoint
CREATE INDEX "capabilities_parent_idx" ON "capabilities" USING btree ("parent_id");--> statement-breakpoint
CREATE INDEX "capabilities_trajectory_idx" ON "capabilities" USING btree ("tenant_id","trajectory_id");