"""Profile updates: the account and domain facts a platform supplies, as partial updates.

A field left out (or null) leaves the stored value unchanged, so a platform can send only
what changed. ``updated_at`` orders updates per field: an older value arriving late never
replaces a newer one (see ``workers.profiles``).
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import AwareDatetime, Field, RootModel, model_validator

from schemas.events import InputId, _Strict

# JSON Schema keyword on a field that is written only while absent (see DomainProfile.reputation).
INITIAL_ONLY = "x-initial-only"
Count = Annotated[int, Field(ge=0, le=10**12)]
# A registrable domain as the moderation worker keys it: lower-case ASCII labels (punycode for IDNs).
Domain = Annotated[
    str,
    Field(
        min_length=3,
        max_length=253,
        pattern=r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$",
    ),
]


class _Fields(_Strict):
    @model_validator(mode="after")
    def _not_empty(self) -> Self:
        if not self.model_fields_set - {k for k, v in self if v is None}:
            raise ValueError("an update sets at least one field")
        return self


class UserProfile(_Fields):
    created_at: AwareDatetime | None = Field(None, description="when the account was created")
    friends: Count | None = None
    followers: Count | None = None
    verified: bool | None = None
    email_disposable: bool | None = Field(None, description="the account's e-mail is from a throwaway provider")


class DomainProfile(_Fields):
    created_at: AwareDatetime | None = Field(None, description="registration date, e.g. from WHOIS")
    # A prior: modstream's feedback worker lowers it with each moderator spam label, and a
    # platform update must not undo that, so it is written only while the domain has none.
    reputation: Annotated[float, Field(ge=0.0, le=1.0)] | None = Field(
        None,
        description="initial prior, 1 is trusted; written only while the domain has none",
        json_schema_extra={INITIAL_ONLY: True},
    )


class _Update(_Strict):
    schema_version: Literal[1] = 1
    updated_at: AwareDatetime  # when the platform observed these values: orders updates


class UserUpdate(_Update):
    entity: Literal["user"]
    id: InputId  # the user_id of PostEvent, in the same forms
    fields: UserProfile


class DomainUpdate(_Update):
    entity: Literal["domain"]
    id: Domain
    fields: DomainProfile


class ProfileUpdate(RootModel[Annotated[UserUpdate | DomainUpdate, Field(discriminator="entity")]]):
    """One record of the profiles topic; ``entity`` picks which fields are allowed."""


PROFILE_FIELDS: dict[str, type[_Fields]] = {"user": UserProfile, "domain": DomainProfile}
