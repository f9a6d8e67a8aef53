# mypy: ignore-errors
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodePrepareResourcesRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    def __init__(self, claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ...) -> None: ...

class NodePrepareResourcesResponse(_message.Message):
    __slots__ = ("claims",)
    class ClaimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NodePrepareResourceResponse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NodePrepareResourceResponse, _Mapping]] = ...) -> None: ...
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.MessageMap[str, NodePrepareResourceResponse]
    def __init__(self, claims: _Optional[_Mapping[str, NodePrepareResourceResponse]] = ...) -> None: ...

class NodePrepareResourceResponse(_message.Message):
    __slots__ = ("devices", "error")
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    devices: _containers.RepeatedCompositeFieldContainer[Device]
    error: str
    def __init__(self, devices: _Optional[_Iterable[_Union[Device, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class Device(_message.Message):
    __slots__ = ("request_names", "pool_name", "device_name", "cdi_device_ids", "share_id")
    REQUEST_NAMES_FIELD_NUMBER: _ClassVar[int]
    POOL_NAME_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    CDI_DEVICE_IDS_FIELD_NUMBER: _ClassVar[int]
    SHARE_ID_FIELD_NUMBER: _ClassVar[int]
    request_names: _containers.RepeatedScalarFieldContainer[str]
    pool_name: str
    device_name: str
    cdi_device_ids: _containers.RepeatedScalarFieldContainer[str]
    share_id: str
    def __init__(self, request_names: _Optional[_Iterable[str]] = ..., pool_name: _Optional[str] = ..., device_name: _Optional[str] = ..., cdi_device_ids: _Optional[_Iterable[str]] = ..., share_id: _Optional[str] = ...) -> None: ...

class NodeUnprepareResourcesRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    def __init__(self, claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ...) -> None: ...

class NodeUnprepareResourcesResponse(_message.Message):
    __slots__ = ("claims",)
    class ClaimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NodeUnprepareResourceResponse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NodeUnprepareResourceResponse, _Mapping]] = ...) -> None: ...
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.MessageMap[str, NodeUnprepareResourceResponse]
    def __init__(self, claims: _Optional[_Mapping[str, NodeUnprepareResourceResponse]] = ...) -> None: ...

class NodeUnprepareResourceResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("namespace", "uid", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    uid: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., uid: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...
